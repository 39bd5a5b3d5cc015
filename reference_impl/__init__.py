"""The reference implementation: the mock's app and the core, with real vLLM behind them.

Only the engine differs from the mock (reference_impl/engine.py). vLLM runs as
its own process; reference_impl/vllm_server.py is the one module that runs in
vLLM's interpreter, so this package imports nothing at the top.
"""
