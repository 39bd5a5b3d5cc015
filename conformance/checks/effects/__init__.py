"""effects:* — each field the API accepts takes effect, seen from outside.

sampling.py: the sampling and token fields (effects:temperature.*, top_k, ignore_eos, ...);
steering.py: steering vectors (effects:steering.*); tempered.py: the statistic that
tells a temperature applied from one clamped. Imported here in the order they run.
"""
from conformance.checks.effects import sampling, steering  # noqa: F401, I001  (import order = run order)
