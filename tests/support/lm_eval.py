"""lm-eval, a real evaluation harness (.venv-lmeval: bash scripts/setup_lmeval.sh), run as its users
run it: `lm_eval --model local-completions` on a small local task (a JSON lines file, no hub
download), with the tokenizer of models/tiny-llama (the Llama 3 vocabulary, the served model's).
A proxy in front (tests/support/upstream.py's) keeps every request it sends, so that each of its
scores is held to the gate's own arithmetic (conformance.checks.model.lm_eval_score) on the same
request, and to the model asked another way: the greedy generation from the context alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from conformance.checks.model import lm_eval_score
from contract import spec
from contract.tokens import decode, encode

ROOT = Path(__file__).resolve().parents[2]
LM_EVAL = ROOT / ".venv-lmeval" / "bin" / "lm_eval"
TOKENIZER = ROOT / "models" / "tiny-llama"
TASK = "acs_local"
# What lm-eval itself may take, a few seconds here; its tokenizer loads from disk.
RUN_TIMEOUT_S = 300


def missing() -> str | None:
    """Why lm-eval cannot run here, or None."""
    if not LM_EVAL.exists():
        return f"no lm-eval at {LM_EVAL} (run: bash scripts/setup_lmeval.sh)"
    if not (TOKENIZER / "tokenizer.json").exists():
        return f"no tokenizer at {TOKENIZER} (run: bash scripts/setup_vllm.sh)"
    return None


@dataclass(frozen=True)
class Scored:
    """One loglikelihood request of lm-eval's and what it made of the answer."""

    context: str
    continuation: str
    loglikelihood: float
    is_greedy: bool


def run(url: str, key: str, model: str, docs: list[dict[str, Any]], folder: Path) -> list[Scored]:
    """`docs` ({"context", "choices", "answer"}) as a multiple-choice task, scored by lm-eval
    against `url`: each choice's loglikelihood and is_greedy, as its samples file writes them."""
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{context}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        'target_delimiter: ""\n'
        "metric_list:\n  - metric: acc\n"
    )
    out = folder / "out"
    args = (
        f"model={model},base_url={url}/v1/completions,tokenizer_backend=huggingface,"
        f"tokenizer={TOKENIZER},num_concurrent=1,max_retries=1"
    )
    env = {
        **os.environ,
        "OPENAI_API_KEY": key,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(folder / "hf"),
    }
    done = subprocess.run(
        [LM_EVAL, "--model", "local-completions", "--model_args", args, "--tasks", TASK]
        + ["--include_path", str(folder), "--log_samples", "--output_path", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (samples,) = out.rglob(f"samples_{TASK}_*.jsonl")
    scored = []
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        for args_, (resp,) in zip(sample["arguments"].values(), sample["resps"], strict=True):
            ll, greedy = resp
            scored.append(Scored(args_["arg_0"], args_["arg_1"], float(ll), greedy == "True"))
    return scored


@dataclass(frozen=True)
class Held:
    """One of lm-eval's scores beside the gate's arithmetic on its request, and the greedy
    generation from its context alone."""

    scored: Scored
    prompt: list[int]
    ctxlen: int
    gate: tuple[float, bool]
    generated: list[int]
    generated_logprobs: list[float]
    answer: dict[str, Any]  # the gate's answer's choice for this prompt


def _ctxlen(model: str, prompt: list[int], context: str) -> int:
    """Where the context's tokens end in lm-eval's prompt: the shortest prefix that reads as it."""
    info = spec().models[model]
    start = 1 if prompt and prompt[0] == info.bos_token_id else 0
    for k in range(start, len(prompt) + 1):
        if decode(info, prompt[start:k]) == context:
            return k
    raise AssertionError(f"no prefix of {prompt} reads {context!r}")


def hold(
    client: httpx.Client, model: str, scored: list[Scored], sent: list[httpx.Request]
) -> list[Held]:
    """Each score of lm-eval's with the request it sent (the one whose prompt reads as its context
    and continuation), that request sent again and scored by the gate, and the greedy generation
    of as many tokens from the context alone."""
    info = spec().models[model]
    by_text: dict[str, tuple[dict[str, Any], int]] = {}
    bodies = [json.loads(r.content) for r in sent if r.method == "POST"]
    for body in bodies:  # a batch of prompts, each a list of token ids
        for i, prompt in enumerate(body["prompt"]):
            assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt), body
            start = 1 if prompt and prompt[0] == info.bos_token_id else 0
            by_text[decode(info, prompt[start:])] = (body, i)
    held = []
    for s in scored:
        body, i = by_text[s.context + s.continuation]
        prompt = body["prompt"][i]
        ctxlen = _ctxlen(model, prompt, s.context)
        answer = client.post("/v1/completions", json=body).json()
        (choice,) = [c for c in answer["choices"] if c["index"] == i]
        gate = lm_eval_score(choice["logprobs"], ctxlen, len(prompt))
        generation = client.post(
            "/v1/completions",
            json={
                "model": model,
                "prompt": prompt[:ctxlen],
                "max_tokens": len(prompt) - ctxlen,
                "temperature": 0,
                "ignore_eos": True,
                "logprobs": 1,
                "return_token_ids": True,
            },
        ).json()
        generated = generation["choices"][0]
        held.append(
            Held(
                s,
                prompt,
                ctxlen,
                gate,
                generated["token_ids"],
                generated["logprobs"]["token_logprobs"],
                choice,
            )
        )
    return held


def docs_with_a_greedy_choice(client: httpx.Client, model: str) -> list[dict[str, Any]]:
    """Three small multiple-choice documents; one choice of each is the server's own greedy
    continuation of its context, so that is_greedy is true somewhere."""
    info = spec().models[model]
    contexts = ["The capital of France is", "The sky is", "Once upon a time there was"]
    docs = []
    for context in contexts:
        greedy = client.post(
            "/v1/completions",
            json={
                "model": model,
                # as lm-eval sends it: the context's tokens, no BOS
                "prompt": encode(info, context, add_special_tokens=False),
                "max_tokens": 2,
                "temperature": 0,
                "ignore_eos": True,
            },
        ).json()["choices"][0]["text"]
        docs.append({"context": context, "choices": [greedy, " blue", " a king"], "answer": 0})
    return docs


def assert_held(held: list[Held], slack: float = 0.0, tie: float = 0.0) -> None:
    """lm-eval's scores are the gate's on the same requests, and its is_greedy is the greedy
    generation from the context alone, whose log probabilities are the echoed ones: exactly
    (the mock), or as far as the batch rule lets a number move (`slack` a token, `tie` a near tie
    between two tokens: openapi.yaml's x-batch-effects) on a real model."""
    assert held
    for h in held:
        n = len(h.prompt) - h.ctxlen
        ll, greedy = h.gate
        assert abs(h.scored.loglikelihood - ll) <= slack * n, (h.scored, h.gate)
        echoed = h.answer["logprobs"]["token_logprobs"][h.ctxlen : len(h.prompt)]
        rows = h.answer["logprobs"]["top_logprobs"][h.ctxlen : len(h.prompt)]
        close = [sorted(r.values())[-2:] for r in rows if len(r) > 1]
        near_tie = any(b - a <= tie for a, b in close) if tie else False
        assert h.scored.is_greedy == greedy or near_tie, (h.scored, h.gate)
        assert h.scored.is_greedy == (h.generated == h.prompt[h.ctxlen :]) or near_tie, h
        if h.generated == h.prompt[h.ctxlen :]:
            assert all(abs(a - b) <= slack for a, b in zip(echoed, h.generated_logprobs)), h
    assert {h.scored.is_greedy for h in held} == {True, False}
