"""Engine events -> the Completion, or the stream's chunks (api-decisions.md, Responses).

Both are built from the same events, so a stream's text joined per choice is
the Completion's text.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from api_server.engine import Activations, ChoiceDelta, Event, LogprobsDelta, Usage
from contract import CompletionRequest, Spec

# Response headers the server sends (components/headers in openapi.yaml; app.py checks at start).
REQUEST_ID = "X-Request-Id"
CLAMPED = "X-Acs-Max-Tokens-Clamped"

# The Content-Type of every JSON body, given whole: Response(mimetype=...) works it out per response.
JSON = "application/json"

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keepalive\n\n"


# Compact UTF-8, as orjson writes it (a Completion in a tenth of json's time); json, with
# the same separators, for what orjson refuses to write (integers past 64 bits).
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# A JSON string, as orjson writes one (encode_basestring: the C escaper, without ASCII escapes).
_string = json.encoder.encode_basestring


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError
        return _JSON.encode(obj).encode()


def _encode(obj: Any) -> str:
    return dumps(obj).decode()


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


@dataclass
class Meta:
    """What every chunk and the Completion share."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
        }


def completion_id(request_id: str, api: Spec) -> str:
    """vLLM's `cmpl-` ids, tied to the request id so logs can be joined (`s`'s x-request-id)."""
    rid = api.request_id
    return rid["completion_prefix"] + request_id.removeprefix(rid["prefix"])


def _logprobs(lp: LogprobsDelta | None) -> dict[str, Any] | None:
    if lp is None:
        return None
    return {
        "tokens": lp.tokens,
        "token_logprobs": lp.token_logprobs,
        "top_logprobs": lp.top_logprobs,
        "text_offset": lp.text_offset,
    }


class Assembler:
    """Accumulates events; counts tokens as they pass (for the Budget and usage).

    A stream's choices are not merged: its chunks are written from each event as it
    comes, and nothing reads the whole (merging cost a copy of each choice's text so
    far per token: quadratic in a long stream's length)."""

    def __init__(self, req: CompletionRequest, meta: Meta) -> None:
        self.req, self.meta = req, meta
        self.return_token_ids = bool(req.body.get("return_token_ids"))
        self.prompt_tokens = sum(req.prompt_token_counts)
        self.completion_tokens = 0
        self.usage: Usage | None = None
        self.activations: Activations | None = None
        self._choices: dict[int, dict[str, Any]] = {}
        self._options: dict[str, Any] = req.body.get("stream_options", {})
        self._prefix: bytes | None = None  # b'data: {...head...,"choices":[' for the stream
        self._merging = not req.stream

    @property
    def used(self) -> int:
        """Tokens to settle the Hold against: the usage, or what has passed so far."""
        if self.usage is not None:
            return self.usage.total_tokens
        return self.prompt_tokens + self.completion_tokens

    def feed(self, event: Event) -> None:
        if isinstance(event, ChoiceDelta):
            self.completion_tokens += len(event.token_ids)
            if self._merging:
                self._merge(event)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Activations):
            self.activations = event

    def _merge(self, d: ChoiceDelta) -> None:
        c = self._choices.get(d.index)
        if c is None:
            c = self._choices[d.index] = {
                "index": d.index,
                "text": "",
                "logprobs": None,
                "finish_reason": None,
                "stop_reason": None,
            }
            if "prompt_logprobs" in self.req.body:
                c["prompt_logprobs"] = d.prompt_logprobs
            if self.return_token_ids:
                c["prompt_token_ids"], c["token_ids"] = d.prompt_token_ids, []
        c["text"] += d.text
        if d.logprobs is not None:
            if c["logprobs"] is None:
                c["logprobs"] = {
                    "tokens": [],
                    "token_logprobs": [],
                    "top_logprobs": [],
                    "text_offset": [],
                }
            for name, values in _logprobs(d.logprobs).items():  # type: ignore[union-attr]
                c["logprobs"][name].extend(values)
        if self.return_token_ids:
            c["token_ids"].extend(d.token_ids)
        c["finish_reason"], c["stop_reason"] = d.finish_reason, d.stop_reason

    def completion(self) -> dict[str, Any]:
        usage = self.usage or Usage(self.prompt_tokens, self.completion_tokens)
        body = {
            **self.meta.head(),
            "choices": [self._choices[i] for i in sorted(self._choices)],
            "usage": usage.as_dict(),
        }
        if self.activations is not None:
            body["activations"] = _activations(self.activations)
        return body

    # -- the stream ------------------------------------------------------------------
    def _head(self) -> bytes:
        """`data: ` and the chunk's head fields up to `"choices":[`, encoded once per stream."""
        if self._prefix is None:
            head = _encode(self.meta.head())
            self._prefix = b"data: " + head[:-1].encode() + b',"choices":['
        return self._prefix

    def chunk(self, event: Event) -> bytes | None:
        """The SSE event for one engine event (None when this request does not show it).
        Byte for byte `sse({**head, "choices": [...], ...})`, without a dict per chunk."""
        options = self._options
        if isinstance(event, ChoiceDelta):
            if (
                event.logprobs is None
                and event.finish_reason is None
                and event.stop_reason is None
                and not self.return_token_ids
            ):
                choice = (
                    '{"index":%d,"text":%s,"logprobs":null,"finish_reason":null,"stop_reason":null}'
                    % (event.index, _string(event.text))
                )
            else:
                fields: dict[str, Any] = {
                    "index": event.index,
                    "text": event.text,
                    "logprobs": _logprobs(event.logprobs),
                    "finish_reason": event.finish_reason,
                    "stop_reason": event.stop_reason,
                }
                if self.return_token_ids:
                    if event.prompt_token_ids is not None:
                        fields["prompt_token_ids"] = event.prompt_token_ids
                    fields["token_ids"] = event.token_ids
                choice = _encode(fields)
            if options.get("continuous_usage_stats"):
                usage = Usage(self.prompt_tokens, self.completion_tokens).as_dict()
                return (
                    self._head()
                    + (choice + "]," + '"usage":' + _encode(usage) + "}").encode()
                    + b"\n\n"
                )
            return self._head() + (choice + "]}").encode() + b"\n\n"
        if isinstance(event, Usage):
            if not options.get("include_usage"):
                return None
            return sse({**self.meta.head(), "choices": [], "usage": event.as_dict()})
        return sse({**self.meta.head(), "choices": [], "activations": _activations(event)})


def _activations(a: Activations) -> dict[str, Any]:
    return {"layers": a.layers, "residual_stream": a.residual_stream}
