"""The mock's hook (api_server/hooks.py): its headers and fault rates (faults.py, counts.py),
simulated latency (latency.py), the load model (load.py, profiles.py), live control
(control.py), and vLLM's metrics of it all (metrics.py, metered.py, kv_cache.py)."""
