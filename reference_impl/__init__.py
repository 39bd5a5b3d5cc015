"""The reference implementation: the one API server (api_server) over `VllmEngine`
(engine.py), with real vLLM and vllm-lens behind it, and no hook: nothing of the mock's
faults or latency is part of it.

vLLM runs as its own process (launcher.py), or is any upstream given with --upstream;
vllm_server.py is the one module that runs in vLLM's interpreter, so this package
imports nothing at the top.
"""
