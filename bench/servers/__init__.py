"""The stand-in servers the benchmarks start (bench/harness.py): the bare Flask ceiling under
the mock's server (bare_app.py), a fake vLLM that streams at a set pace (fake_vllm.py), and a
relay that passes a stream through (relay.py). None of them is a benchmark."""
