"""An upstream vLLM as the reference's engine meets it, in process: its SSE answers (sse,
content, usage, SKY), the API app over a fake upstream (api, ApiClient), and what a client reads
back (completion, events). The reference's engine tests and those of its wire, metrics and
benches stand on them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from api_server import ServerConfig, create_app
from conformance.wire.sse import parse_text
from contract import spec
from reference_impl.engine import VllmEngine
from tests.support.mock import parse_sse
from tests.support.upstream import Answer, UpstreamServer

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = spec().default_model
CHUNK = {"id": "cmpl-x", "object": "text_completion", "created": 1, "model": MODEL}


def sse(*payloads: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads)
    return out + (b"data: [DONE]\n\n" if done else b"")


def content(
    index: int, text: str, ids: list[int], finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        **CHUNK,
        "choices": [
            {
                "index": index,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "token_ids": ids,
                **extra,
            }
        ],
    }


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        **CHUNK,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "system_fingerprint": "vllm-0.32.0",
    }


SKY = sse(
    content(0, " blue", [6437], prompt_token_ids=[128000, 791, 13180, 374]),
    content(0, " today", [3432], "length"),
    usage(4, 2),
)


class Upstream:
    """A fake vLLM: records what it is sent and answers with `answer(request)`."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.sent: list[dict[str, Any]] = []
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.content))
        self.headers.append(request.headers)
        return self.answer(request)


def completion(stream: bytes) -> dict[str, Any]:
    """What vLLM answers without stream for the request that streams as `stream`."""
    out: dict[str, Any] = {**CHUNK, "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for event in parse_text(stream.decode()).events:
        chunk = event.payload if isinstance(event.payload, dict) else {}
        for c in chunk.get("choices") or ():
            merged = choices.setdefault(c["index"], {**c, "text": "", "token_ids": []})
            merged["text"] += c["text"]
            merged["token_ids"] += c["token_ids"]
            merged["finish_reason"] = c["finish_reason"]
            merged["prompt_token_ids"] = merged.get("prompt_token_ids") or c.get("prompt_token_ids")
        for key in ("usage", "activations", "error"):
            if key in chunk:
                out[key] = chunk[key]
    out["choices"] = [choices[i] for i in sorted(choices)]
    return out


def streamed(body: bytes, status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    """vLLM answering `body` (SSE) to a request that streams, the same as one Completion otherwise."""

    def answer(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return httpx.Response(
                status, content=body, headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(status, json=completion(body))

    return answer


class ApiClient(httpx.Client):
    """A client of the API's app in front of `answer` served as vLLM; closing it stops both."""

    def __init__(
        self,
        answer: Answer,
        config: ServerConfig | None = None,
        models: Any = None,
        wait_seconds: float | None = None,
    ) -> None:
        self.upstream = UpstreamServer(answer)
        self.engine = VllmEngine(self.upstream.url, MODEL, wait_seconds=wait_seconds, api=spec())
        app = create_app(config or ServerConfig(keys=(KEY,)), self.engine, models)
        super().__init__(
            transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
        )

    def close(self) -> None:
        super().close()
        self.engine.close()
        self.upstream.close()

    def __exit__(self, *exc: Any) -> None:  # (httpx.Client's own closes its transport only)
        self.close()


def api(answer: Answer, **config: Any) -> ApiClient:
    wait_seconds = config.pop("wait_seconds", None)
    return ApiClient(answer, ServerConfig(keys=(KEY,), **config), wait_seconds=wait_seconds)


def events(text: str) -> list[Any]:
    return parse_sse(text).events


BODY = {"model": MODEL, "prompt": "The sky is", "max_tokens": 2}
