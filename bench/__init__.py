"""The benchmarks: each runs as `.venv/bin/python -m bench.<name>` from the repository root
(bench/README.md); bench/harness.py is what they share."""
