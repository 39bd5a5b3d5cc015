"""The engine: a run's configuration (config.py), the checks' registry (registry.py) and the
context each check runs in (context.py), the runner with its token ledger (runner.py,
token_cost.py), and what a run produces (results.py, coverage.py, baseline.py)."""
