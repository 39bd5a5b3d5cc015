"""effects:* — each field the API accepts takes effect, seen from outside.

sampling.py: the sampling and token fields (effects:temperature.*, top_k, ignore_eos, ...);
steering.py: steering vectors (effects:steering.*); helpers/tempered.py holds the statistic that
tells a temperature applied from one clamped. MODULES is the order they run in.
"""

from importlib import import_module

MODULES = ("sampling", "steering")
for _module in MODULES:
    import_module(f"{__name__}.{_module}")
