"""Parity: the mock and the reference give the same status, code, param and message.

Both run in this process on the same app factory; only the engine differs
(the fake one, or vLLM). Which cases, and why:
- every golden case, with both serving this deployment's model (the tiny
  model: 4 layers, hidden 128, vLLM's max_model_len), so that the limits the
  errors name are the same on both;
- the golden cases that do not depend on the model's numbers (not tagged
  caps or lens), with the mock serving the spec's llama-8b as shipped;
- each size cap at its limit and one past it, generated from the deployment's
  own numbers (the golden cap cases assume max_model_len 131,072).
A request both accept is compared by status (the texts differ by design) and,
for a stream, by its first event; it is kept cheap as the conformance suite
keeps it (a stream closed after its first event, or only the end token allowed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import api_server
import mock_server
from conformance.golden import Case, load_cases, padded_body
from contract import ModelInfo, spec
from mock_server.config import MockConfig
from reference_impl.engine import VllmEngine

pytestmark = pytest.mark.vllm

SERVED = spec().default_model
CHEAP_TOKENS = 16
CASES = load_cases()

Outcome = tuple[Any, ...]
Pair = tuple[httpx.Client, httpx.Client]


def _client(app: Any) -> httpx.Client:
    return httpx.Client(
        transport=httpx.WSGITransport(app=app), base_url="http://api.test", timeout=120
    )


@pytest.fixture(scope="module")
def same_model(reference: Any, models: dict[str, ModelInfo]) -> Iterator[Pair]:
    """(mock, reference), both serving the deployment's model."""
    config = MockConfig(keys=(reference.key,))
    engine = VllmEngine(reference.vllm_url, SERVED, api=spec())
    mock = _client(mock_server.create_app(config, None, models))
    ref = _client(api_server.create_app(config, engine, models))
    yield mock, ref
    mock.close()
    ref.close()
    engine.close()


@pytest.fixture(scope="module")
def spec_mock(reference: Any, same_model: Pair) -> Iterator[Pair]:
    """(mock as shipped, with the spec's llama-8b; the same reference)."""
    mock = _client(mock_server.create_app(MockConfig(keys=(reference.key,))))
    yield mock, same_model[1]
    mock.close()


def outcome(reply: httpx.Response, body: bytes) -> Outcome:
    """What must agree: the status, and an error's type, code, param and message."""
    if reply.headers.get("content-type", "").startswith("application/json"):
        data = json.loads(body)
        if isinstance(data, dict) and "error" in data:
            e = data["error"]
            return reply.status_code, e["type"], e["code"], e["param"], e["message"]
    return (reply.status_code,)


def send(
    c: httpx.Client, method: str, path: str, content: bytes | None, headers: dict[str, str]
) -> Outcome:
    stream = headers.pop("X-Parity-Stream", None) is not None
    with c.stream(method, path, content=content, headers=headers) as reply:
        if stream and reply.status_code == 200:
            first = next(line for line in reply.iter_lines() if line.startswith("data: "))
            data = json.loads(first[6:])
            return 200, "choices" in data and bool(data["choices"])  # a content chunk first
        return outcome(reply, reply.read())


def cheap(body: Any, generates: int, model: ModelInfo) -> tuple[Any, bool]:
    """(body, read only the first event): as the conformance suite makes an accepted request cheap."""
    if not isinstance(body, dict) or generates <= CHEAP_TOKENS:
        return body, False
    if body.get("stream") is True:
        return body, True
    if {"allowed_token_ids", "min_tokens", "ignore_eos"} & set(body):
        return body, False
    return {**body, "allowed_token_ids": list(model.eos_token_ids)}, False


def both(
    pair: Pair, method: str, path: str, content: bytes | None, headers: dict[str, str]
) -> tuple[Outcome, Outcome]:
    return tuple(send(c, method, path, content, dict(headers)) for c in pair)  # type: ignore[return-value]


def golden(pair: Pair, case: Case, key: str, model: ModelInfo) -> tuple[Outcome, Outcome]:
    headers = dict(case.headers)
    if case.auth == "default":
        headers["Authorization"] = f"Bearer {key}"
    elif case.auth != "none":
        headers["Authorization"] = case.auth
    content = case.body
    if case.expect_status == 200 and content is not None:
        body, first_only = cheap(json.loads(content), case.generates, model)
        content = json.dumps(body).encode()
        if first_only:
            headers["X-Parity-Stream"] = "1"
    return both(pair, case.method, case.path, content, headers)


def _mismatches(pair: Pair, cases: list[Case], key: str, model: ModelInfo) -> list[str]:
    out = []
    for case in cases:
        mock, ref = golden(pair, case, key, model)
        if mock != ref:
            out.append(f"{case.id}: mock {mock} != reference {ref}")
    return out


def test_golden_cases_same_model(same_model: Pair, reference: Any, model: ModelInfo) -> None:
    mismatches = _mismatches(same_model, CASES, reference.key, model)
    assert not mismatches, "\n".join(mismatches)


def test_golden_cases_independent_of_the_model_against_the_shipped_mock(
    spec_mock: Pair, reference: Any, model: ModelInfo
) -> None:
    cases = [c for c in CASES if not {"caps", "lens"} & set(c.tags)]
    assert len(cases) > 150
    mismatches = _mismatches(spec_mock, cases, reference.key, model)
    assert not mismatches, "\n".join(mismatches)


# -- each cap at its limit and one past it, from the deployment's numbers --------------------------


def cap_cases(model: ModelInfo) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(id, body, accepted) for each cap of x-caps / x-token-rules at its limit and one past it."""
    caps, length = spec().caps, model.max_model_len

    def body(tokens, **f) -> dict[str, Any]:
        return {
            "model": SERVED,
            "prompt": [0] * tokens,
            **f,
        }

    no_stream = caps["max_tokens_without_stream"]
    if 1 + no_stream <= length:
        yield "without_stream.limit", body(1, max_tokens=no_stream, allowed_token_ids=[0]), True
    yield "without_stream.limit+1", body(1, max_tokens=no_stream + 1), False
    total = caps["max_generated_tokens"]
    n = next(n for n in range(1, 129) if total % n == 0 and 1 + total // n <= length)
    yield "generated.limit", body(1, n=n, max_tokens=total // n, stream=True, temperature=1), True
    yield (
        "generated.limit+1",
        body(1, n=n, max_tokens=total // n + 1, stream=True, temperature=1),
        False,
    )
    yield "context.limit", body(length - 1, max_tokens=1), True
    yield "context.limit+1", body(length, max_tokens=1), False
    yield "prompt.without_max_tokens.limit", body(length - 1), True
    yield "prompt.without_max_tokens.limit+1", body(length), False
    for layers in ([0], list(range(model.num_layers))):
        positions = model.capture_cap // len(layers)
        name = f"capture.{len(layers)}_layers"
        if positions + 1 <= length:
            yield (
                f"{name}.limit",
                body(positions, max_tokens=1, output_residual_stream=layers),
                True,
            )
        yield (
            f"{name}.limit+1",
            body(positions + 1, max_tokens=1, output_residual_stream=layers),
            False,
        )
    yield "min_tokens.limit", body(1, max_tokens=2, min_tokens=2), True
    yield "min_tokens.limit+1", body(1, max_tokens=2, min_tokens=3), False


def test_cap_cases_from_the_deployments_numbers(
    same_model: Pair, reference: Any, model: ModelInfo
) -> None:
    headers = {"Authorization": f"Bearer {reference.key}", "Content-Type": "application/json"}
    mismatches, wrong = [], []
    for id, body, accepted in cap_cases(model):
        stream = {"X-Parity-Stream": "1"} if body.get("stream") else {}
        mock, ref = both(
            same_model, "POST", "/v1/completions", json.dumps(body).encode(), {**headers, **stream}
        )
        if mock != ref:
            mismatches.append(f"{id}: mock {mock} != reference {ref}")
        if (ref[0] == 200) != accepted:
            wrong.append(f"{id}: {ref}")
    limit = spec().caps["max_body_bytes"]
    small = {"model": SERVED, "prompt": [0], "max_tokens": 1}
    for id, size, status in (("body.limit", limit, 200), ("body.limit+1", limit + 1, 413)):
        mock, ref = both(same_model, "POST", "/v1/completions", padded_body(small, size), headers)
        if mock != ref or ref[0] != status:
            mismatches.append(f"{id}: mock {mock}, reference {ref}, want {status}")
    assert not mismatches and not wrong, "\n".join(mismatches + wrong)
