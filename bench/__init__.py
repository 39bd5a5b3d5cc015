"""The benchmarks: `python -m bench` lists them, `python -m bench NAME [ARGS]` runs one
(bench/README.md); bench/harness.py is what they share, bench/report.py how they write,
bench/servers/ the stand-in servers they start."""
