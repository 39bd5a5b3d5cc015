"""A stand-in for vLLM on a GPU, for measuring the API in front of it: a batch step every
`--step-ms`, one token to every open request per step, in vLLM 0.32's exact bytes.

    .venv/bin/python -m bench.servers.fake_vllm --port 8001 [--step-ms 20] [--model llama-8b]

Why: on this machine's CPU vLLM makes ~350 tokens/s in all, and its engine shares the
cores with the API, so the API's cost per token with 256 streams at once (a GPU's load:
a token for every stream each step) cannot be measured against it. This server costs
little per token (one write per stream per step, from a template), so what the API in
front of it spends is the API's. It answers what the reference asks of vLLM: GET /health,
GET /v1/models, and POST /v1/completions with or without stream (prompts as token ids,
`max_tokens`, `n`, `stream_options.include_usage`); it does not check the request.

The bytes are vLLM 0.32's under uvicorn, as captured from `vllm serve` with the tiny
model: a stream in chunked encoding, one chunk per event, the ids `cmpl-{X-Request-Id}`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, cast

import httptools
import orjson
import uvloop

# (text, token id) the streams cycle through: a few of the tiny model's tokens.
TOKENS = [(" blue", 6437), (" today", 3432), (" and", 323), (" the", 279), (" sky", 13180)]
FINGERPRINT = "vllm-0.32.0-8510dbae"


class Step:
    """The batch clock: every `seconds`, each open request gets its next token."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.open: set[Request] = set()

    async def run(self) -> None:
        due = time.monotonic()
        while True:
            due += self.seconds
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            for request in list(self.open):
                if request.step():
                    self.open.discard(request)


class Request:
    """One completion: its tokens come one per step; a stream writes each, at once."""

    def __init__(
        self, transport: asyncio.Transport, body: dict[str, Any], request_id: str, model: str
    ) -> None:
        self.transport = transport
        self.model = model
        self.id = f"cmpl-{request_id}"
        self.created = int(time.time())
        self.max_tokens = int(body.get("max_tokens") or 16)
        self.n = int(body.get("n") or 1)
        prompt = body.get("prompt")
        self.prompts = prompt if prompt and isinstance(prompt[0], list) else [prompt or []]
        self.stream = bool(body.get("stream"))
        self.usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.made = 0
        if self.stream:
            transport.write(
                b"HTTP/1.1 200 OK\r\ndate: " + http_date() + b"\r\nserver: uvicorn\r\n"
                b"content-type: text/event-stream; charset=utf-8\r\nvary: Origin\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )

    def step(self) -> bool:
        """The next token of every choice; True when the request is done."""
        if self.transport.is_closing():  # the API went away: vLLM aborts the request
            return True
        self.made += 1
        if not self.stream:
            if self.made == self.max_tokens:
                self._answer()
            return self.made == self.max_tokens
        last = self.made == self.max_tokens
        text, token = TOKENS[self.made % len(TOKENS)]
        out = []
        for p, prompt in enumerate(self.prompts):
            for i in range(self.n):
                choice = {
                    "index": p * self.n + i,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "length" if last else None,
                    "stop_reason": None,
                    "prompt_token_ids": prompt if self.made == 1 else None,
                    "token_ids": [token],
                }
                out.append(self._event({"choices": [choice]}))
        if last and not self.usage:  # vLLM puts it on the last event
            out[-1] = self._event({"choices": [choice], "system_fingerprint": FINGERPRINT})
        if last:
            if self.usage:
                out.append(
                    self._event(
                        {"choices": [], "usage": self._usage(), "system_fingerprint": FINGERPRINT}
                    )
                )
            out.append(b"data: [DONE]\n\n")
        self.transport.write(
            b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in out) + (b"0\r\n\r\n" if last else b"")
        )
        return last

    def _event(self, fields: dict[str, Any]) -> bytes:
        head = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
        }
        return b"data: " + orjson.dumps({**head, **fields}) + b"\n\n"

    def _usage(self) -> dict[str, int]:
        prompt = sum(len(p) for p in self.prompts) * self.n
        completion = self.max_tokens * self.n * len(self.prompts)
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }

    def _answer(self) -> None:
        texts = [TOKENS[k % len(TOKENS)] for k in range(1, self.max_tokens + 1)]
        choices = [
            {
                "index": p * self.n + i,
                "text": "".join(t for t, _ in texts),
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": [k for _, k in texts],
                "prompt_logprobs": None,
                "prompt_token_ids": prompt,
                "routed_experts": None,
            }
            for p, prompt in enumerate(self.prompts)
            for i in range(self.n)
        ]
        usage = {**self._usage(), "prompt_tokens_details": None, "completion_tokens_details": None}
        body = orjson.dumps(
            {
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": choices,
                "service_tier": None,
                "system_fingerprint": FINGERPRINT,
                "usage": usage,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        )
        self.transport.write(_head(200, body) + body)


def _head(status: int, body: bytes, kind: bytes = b"application/json") -> bytes:
    reason = b"OK" if status == 200 else b"Not Found"
    return (
        b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: uvicorn\r\ncontent-length: %d\r\n"
        b"content-type: %s\r\nvary: Origin\r\n\r\n" % (status, reason, http_date(), len(body), kind)
    )


def http_date() -> bytes:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()).encode()


class Connection(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, one request at a time, as the API's pool uses it."""

    def __init__(self, step: Step, model: str, max_model_len: int) -> None:
        self.step, self.model, self.max_model_len = step, model, max_model_len
        self.parser = httptools.HttpRequestParser(self)
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP server's

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body, request_id = (
            self.url,
            b"".join(self.body),
            self.headers.get(b"x-request-id", b"x"),
        )
        self.headers, self.body = {}, []
        if url == b"/health":
            self.transport.write(_head(200, b""))
        elif url == b"/v1/models":
            entry = {
                "id": self.model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": self.model,
                "parent": None,
                "max_model_len": self.max_model_len,
                "permission": [],
            }
            data = orjson.dumps({"object": "list", "data": [entry]})
            self.transport.write(_head(200, data) + data)
        elif url == b"/v1/completions":
            self.step.open.add(
                Request(self.transport, orjson.loads(body), request_id.decode(), self.model)
            )
        else:
            data = orjson.dumps({"detail": "Not Found"})
            self.transport.write(_head(404, data) + data)


async def serve(host: str, port: int, step_ms: float, model: str, max_model_len: int) -> None:
    step = Step(step_ms / 1000)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(step, model, max_model_len), host, port, backlog=4096
    )
    async with server:
        await step.run()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument(
        "--step-ms", type=float, default=20.0, help="one batch step: a token to every open request"
    )
    p.add_argument("--model", default="llama-8b", help="the served model's name")
    p.add_argument("--max-model-len", type=int, default=8192)
    args = p.parse_args(argv)
    uvloop.run(serve(args.host, args.port, args.step_ms, args.model, args.max_model_len))


if __name__ == "__main__":
    main()
