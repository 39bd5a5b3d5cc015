"""What the gate reads from the specs: the API's bodies and messages (bodies.py), its
documented rules (rules.py), and vLLM's /metrics as recorded (metrics.py, vllm_metrics.json)."""
