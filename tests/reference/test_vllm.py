"""Facts about the reference implementation that only real vLLM + vllm-lens can show.

One vLLM for the session (tests/support/reference.py); every request here is
a few tokens of the tiny model (4 layers, hidden 128, the Llama 3 vocabulary).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
import zstandard

from api_server import ServerConfig
from api_server.budget.sqlite import BudgetStore
from conformance.wire.ledger import Ledger
from conformance.wire.token_cost import CostModel
from contract import ModelInfo, encode_tensor, spec
from contract.tokens import decode as decode_ids
from contract.tokens import encode, token_bytes
from tests.support.mock import parse_sse

pytestmark = pytest.mark.vllm

Reference = Any  # tests.support.reference.Reference (not imported: it is a pytest plugin)
Client = Callable[..., httpx.Client]
COMPLETIONS = spec().completions_path
SERVED = spec().default_model
SKY = {"model": SERVED, "prompt": "The sky is", "temperature": 0}  # 4 tokens with BOS


def decode(tensor: dict[str, Any]) -> np.ndarray:
    """vllm-lens's encoding -> float32, bf16 (int16 on the wire) widened exactly."""
    raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(tensor["data"]))
    assert tensor["compression"] == "zstd" and tensor["original_dtype"] == "torch.bfloat16"
    bits = (
        np.frombuffer(raw, np.dtype(tensor["dtype"]).newbyteorder("<"))
        .astype(np.uint16)
        .astype(np.uint32)
    )
    return (bits << 16).view(np.float32).reshape(tensor["shape"])


def post(ref: Reference, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(ref.url + COMPLETIONS, json=body, headers=ref.auth, timeout=120)


def stream_events(ref: Reference, body: dict[str, Any]) -> list[Any]:
    r = post(ref, {**body, "stream": True})
    assert r.status_code == 200, r.text
    return parse_sse(r.text).events


def vllm_direct(ref: Reference, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(ref.vllm_url + COMPLETIONS, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


# -- activations -----------------------------------------------------------------------------


def test_activations_decode_to_layers_by_prompt_plus_generated_minus_one(
    reference: Reference, model: ModelInfo
) -> None:
    layers, generated = [3, 0, 2], 5
    body = {**SKY, "max_tokens": generated, "ignore_eos": True, "output_residual_stream": layers}
    data = post(reference, body).json()
    assert data["usage"]["completion_tokens"] == generated
    acts = data["activations"]
    assert acts["layers"] == sorted(layers) and set(acts["residual_stream"]) == set(
        spec().schema("EncodedTensor")["properties"]
    )
    values = decode(acts["residual_stream"])
    assert values.shape == (len(layers), 4 + generated - 1, model.hidden_size)
    assert np.isfinite(values).all() and np.abs(values).max() > 0
    # exactly what vLLM + vllm-lens captured for the same request, sent to vLLM directly
    direct = vllm_direct(
        reference,
        {
            **SKY,
            "max_tokens": generated,
            "ignore_eos": True,
            "vllm_xargs": {"output_residual_stream": layers},
        },
    )
    assert np.array_equal(values, decode(direct["activations"]["residual_stream"]))
    assert data["choices"][0]["text"] == direct["choices"][0]["text"]


def test_activations_come_in_a_stream_after_the_usage(
    reference: Reference, model: ModelInfo
) -> None:
    body = {
        **SKY,
        "max_tokens": 3,
        "ignore_eos": True,
        "output_residual_stream": [1],
        "stream_options": {"include_usage": True},
    }
    events = stream_events(reference, body)
    assert events[-1] == "[DONE]" and "usage" in events[-3]
    acts = events[-2]["activations"]
    assert events[-2]["choices"] == [] and acts["layers"] == [1]
    assert decode(acts["residual_stream"]).shape == (1, 4 + 3 - 1, model.hidden_size)


# -- steering --------------------------------------------------------------------------------


def ones_vector(model: ModelInfo, scale: float) -> dict[str, Any]:
    """bf16 ones over the hidden size at layer 0 (VLLM_NOTES.md's example vector)."""
    bits = np.full((1, model.hidden_size), 0x3F80, np.uint16).view(np.int16)  # bf16 1.0
    return {
        "activations": encode_tensor(bits, "torch.bfloat16"),
        "layer_indices": [0],
        "scale": scale,
    }


def test_steering_changes_the_output_at_temperature_0(
    reference: Reference, model: ModelInfo
) -> None:
    body = {**SKY, "max_tokens": 8, "ignore_eos": True}
    plain = post(reference, body).json()["choices"][0]["text"]
    steered = post(reference, {**body, "apply_steering_vectors": [ones_vector(model, 50.0)]}).json()
    assert steered["choices"][0]["text"] != plain
    again = post(reference, {**body, "apply_steering_vectors": [ones_vector(model, 50.0)]}).json()
    assert again["choices"][0]["text"] == steered["choices"][0]["text"]  # deterministic
    assert post(reference, body).json()["choices"][0]["text"] == plain  # steering is per request


# -- refused before vLLM ---------------------------------------------------------------------


def test_lens_requests_the_api_refuses_never_reach_vllm(
    reference: Reference, reference_client: Client, counting_proxy: Any, model: ModelInfo
) -> None:
    vector = ones_vector(model, 1.0)
    refused = [
        ({"prompt": ["The sky", "The sea"], "output_residual_stream": [0]}, "prompt"),
        ({"prompt": [[1, 2], [3, 4]], "apply_steering_vectors": [vector]}, "prompt"),
        ({"prompt": "The sky", "n": 2, "temperature": 1, "output_residual_stream": [0]}, "n"),
        ({"prompt": "The sky", "n": 3, "temperature": 1, "apply_steering_vectors": [vector]}, "n"),
    ]
    with reference_client(upstream=counting_proxy.url) as c:
        for fields, param in refused:
            r = c.post(COMPLETIONS, json={"model": SERVED, "max_tokens": 2, **fields})
            assert (r.status_code, r.json()["error"]["param"]) == (400, param), r.text
        assert counting_proxy.requests == []
        ok = c.post(COMPLETIONS, json={**SKY, "max_tokens": 2, "output_residual_stream": [0]})
    assert ok.status_code == 200 and len(counting_proxy.requests) == 1  # the counter does count
    (sent,) = counting_proxy.requests
    assert sent.headers["X-Request-Id"] == ok.headers["X-Request-Id"]
    assert json.loads(sent.content)["vllm_xargs"] == {"output_residual_stream": [0]}
    # Why: vLLM would take several prompts and capture the first one only.
    direct = vllm_direct(
        reference,
        {
            "model": SERVED,
            "prompt": [[128000, 791], [128000, 791, 13180]],
            "max_tokens": 2,
            "vllm_xargs": {"output_residual_stream": [0]},
        },
    )
    assert (
        len(direct["choices"]) == 2
        and direct["activations"]["residual_stream"]["shape"][1] == 2 + 2 - 1
    )


# -- the same answers as vLLM ----------------------------------------------------------------


def test_echo_and_logprobs_as_vllm_gives_them(reference: Reference) -> None:
    for prompt in ("The sky is", [128000, 791, 13180, 374]):
        body = {
            "model": SERVED,
            "prompt": prompt,
            "max_tokens": 3,
            "temperature": 0,
            "echo": True,
            "logprobs": 2,
        }
        ours, direct = (
            post(reference, body).json()["choices"][0],
            vllm_direct(reference, body)["choices"][0],
        )
        assert (ours["text"], ours["logprobs"]) == (direct["text"], direct["logprobs"]), prompt


def test_a_prompt_of_ids_ending_inside_a_character_comes_back_in_the_text_and_is_no_finding(
    reference: Reference,
) -> None:
    """vLLM 0.32's detokenizer writes such a prompt's whole text before the first token, without
    echo; the gate's ledger charges what the text holds and finds no request past its price (it
    did, on a schemathesis body in CI: 13 tokens for 4)."""
    model = spec().models[SERVED]
    words = encode(model, "The quick brown fox jumps over the lazy dog. " * 8, False)
    lone_byte = next(
        t
        for t in range(256)
        if len(token_bytes(model, t)) == 1 and token_bytes(model, t)[0] >= 0x80
    )
    body = {
        "model": SERVED,
        "prompt": [*words, lone_byte],
        "max_tokens": 4,
        "return_token_ids": True,
    }
    choice = post(reference, body).json()["choices"][0]
    assert len(choice["token_ids"]) == 4
    assert choice["text"].startswith(decode_ids(model, words))
    ledger = Ledger()
    ledger.cost = CostModel.of(spec(), reference.models()[SERVED].max_model_len)
    ledger.count_text = lambda text: len(encode(model, text, False))
    read = ledger.count_text(choice["text"])
    assert read > 4 + len(words) // 2  # the prompt's text is in it
    plain = {**body, "return_token_ids": False}
    ledger.count({"choices": [{"text": choice["text"]}]}, json.dumps(plain).encode(), 4, None)
    assert (ledger.tokens, ledger.overspends) == (read, [])


def test_prompt_logprobs_without_stream(reference: Reference) -> None:
    body = {**SKY, "max_tokens": 2, "prompt_logprobs": 1}
    ours, direct = (
        post(reference, body).json()["choices"][0],
        vllm_direct(reference, body)["choices"][0],
    )
    assert (
        ours["prompt_logprobs"] == direct["prompt_logprobs"] and ours["prompt_logprobs"][0] is None
    )
    assert ours["text"] == direct["text"]


def test_priority_in_a_string_runs(reference: Reference) -> None:
    r = post(reference, {**SKY, "max_tokens": 1, "priority": "-5"})
    assert r.status_code == 200, r.text


# -- the Budget, and a client that goes away ----------------------------------------------------


def test_the_hold_settles_on_vllms_usage(
    reference: Reference, reference_client: Client, tmp_path: Any
) -> None:
    config = ServerConfig(keys=(reference.key,), budget_tokens=1000, budget_dir=str(tmp_path))
    with reference_client(config) as c:
        full = c.post(COMPLETIONS, json={**SKY, "max_tokens": 5, "ignore_eos": True}).json()[
            "usage"
        ]
        # held 4 + 50, stopped after one token (only the end token is allowed)
        short = c.post(
            COMPLETIONS, json={**SKY, "max_tokens": 50, "allowed_token_ids": [128001]}
        ).json()["usage"]
    assert (full["total_tokens"], short["completion_tokens"]) == (9, 1)
    assert BudgetStore(tmp_path, 1000).remaining(reference.key) == 1000 - 9 - 5


def test_a_clamped_max_tokens_is_what_vllm_runs(
    reference: Reference, reference_client: Client, tmp_path: Any
) -> None:
    config = ServerConfig(keys=(reference.key,), budget_tokens=12, budget_dir=str(tmp_path))
    with reference_client(config) as c:
        r = c.post(COMPLETIONS, json={**SKY, "max_tokens": 20, "ignore_eos": True})
    assert (
        r.headers["X-Acs-Max-Tokens-Clamped"] == "8" and r.json()["usage"]["completion_tokens"] == 8
    )


def _metric(ref: Reference, name: str) -> float:
    metrics = httpx.get(ref.vllm_url + "/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", metrics, re.M)
    assert found, f"vLLM's metrics have no {name}"
    return float(found.group(1))


def _finished(ref: Reference) -> float:
    """Requests vLLM's engine finished, over every finished_reason (a choice of n counts once)."""
    metrics = httpx.get(ref.vllm_url + "/metrics", timeout=10).text
    counts = re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", metrics, re.M)
    assert counts, "vLLM's metrics have no vllm:request_success_total"
    return sum(float(c) for c in counts)


def _idle(ref: Reference, deadline_s: float) -> bool:
    """Waits until vLLM runs nothing; False if it still runs something after deadline_s."""
    deadline = time.monotonic() + deadline_s
    while _metric(ref, "vllm:num_requests_running") > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_client_that_goes_away_aborts_the_vllm_request(
    reference: Reference, model: ModelInfo
) -> None:
    # The longest request the caps allow: n choices of nearly max_model_len tokens, each step
    # of vLLM made slow by top_p (it sorts the vocabulary for every choice: 8x slower here),
    # so that vLLM would take minutes to finish it. The proof races no clock. On a starved
    # CPU vLLM's own frontend falls seconds behind its engine (seen: 12 s without a byte
    # to the API while the engine ran thousands of steps, and the abort waits in that
    # frontend): how many tokens run before the abort lands says how busy the machine was,
    # not whether the abort works. What does: vLLM counts each choice that ran to its end in
    # vllm:request_success_total (finished_reason "length" here: ignore_eos) and an aborted
    # one in no series at all (VLLM_NOTES.md). So the request ended as aborted when vLLM
    # stopped running it, having finished none of its choices and generated less than asked.
    n = 8
    max_tokens = spec().caps["max_generated_tokens"] // n
    assert max_tokens + 4 <= model.max_model_len  # the prompt is 4 tokens
    assert _idle(reference, 120), "vLLM still runs an earlier test's request"
    finished, generated = _finished(reference), _metric(reference, "vllm:generation_tokens_total")
    body = {
        **SKY,
        "temperature": 1,
        "top_p": 0.9,
        "n": n,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream(
        "POST", reference.url + COMPLETIONS, json=body, headers=reference.auth, timeout=60
    ) as r:
        first = next(line for line in r.iter_lines() if line.startswith("data: "))
    assert json.loads(first[6:])["choices"][0]["finish_reason"] is None
    # Not aborted, vLLM runs all n x max_tokens for minutes: the wait bounds that failure.
    assert _idle(reference, 180), "vLLM still runs the request of a client that went away"
    assert _finished(reference) - finished == 0, "vLLM ran the request to its end: no abort"
    assert 0 < _metric(reference, "vllm:generation_tokens_total") - generated < n * max_tokens
