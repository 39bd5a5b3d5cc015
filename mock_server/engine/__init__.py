"""The fake engine and its model: a deterministic causal model over the spec's vocabulary
(model.py, vocab.py, words.py), vLLM's sampler (sampler.py) and logprobs (logprobs.py), and
vllm-lens' captures and steering (activations.py, steered.py), driven by FakeEngine
(fake_engine.py)."""
