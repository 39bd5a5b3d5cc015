"""A deployment that conforms to nothing (an httpx.MockTransport handler): it accepts every
request and generates all the request allows, up to its max_model_len; and one that drops each
request's first attempt after generating it. The ledger's tests (tests/conformance/test_ledger.py)
run the gate against them."""

from __future__ import annotations

import json
from typing import Any

import httpx

from contract import spec

MODEL = spec().default_model
EOS = frozenset(spec().models[MODEL].eos_token_ids)
SERVED_LEN = 300  # the fake deployment's max_model_len (GET /v1/models)


def generated(body: dict[str, Any]) -> int:
    """What the fake server writes: everything the request allows (one token if only end tokens)."""
    per = body.get("max_tokens") or SERVED_LEN - 1
    if body.get("allowed_token_ids") and set(body["allowed_token_ids"]) <= EOS:
        per = 1
    prompts = body.get("prompt")
    count = (
        len(prompts)
        if isinstance(prompts, list) and prompts and isinstance(prompts[0], list)
        else 1
    )
    return count * int(body.get("n") or 1) * per


class LaxServer:
    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"data": [{"id": MODEL, "max_model_len": SERVED_LEN}]})
        body = json.loads(request.content)
        self.posts.append(body)
        written = generated(body)
        if body.get("stream"):  # a chunk a token, as vLLM streams
            chunk = {"choices": [{"index": 0, "text": "x"}]}
            events = [f"data: {json.dumps(chunk)}\n\n"] * written + ["data: [DONE]\n\n"]
            return httpx.Response(
                200, content="".join(events).encode(), headers={"Content-Type": "text/event-stream"}
            )
        choice = {"index": 0, "text": "x" * written, "token_ids": [0] * written}
        return httpx.Response(
            200, json={"choices": [choice], "usage": {"completion_tokens": written}}
        )


class DropsFirst(LaxServer):
    """Generates all a request allows, then drops the connection without a byte; the same
    request again is answered."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[bytes] = set()
        self.written = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.written += generated(json.loads(request.content))
            if request.content not in self.seen:
                self.seen.add(request.content)
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return super().__call__(request)
