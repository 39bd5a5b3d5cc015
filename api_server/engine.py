"""The engine protocol (`Engine`: one method to write, the rest declared with
defaults), and the events it yields.

An engine turns a validated request into events shaped like vLLM's output:
per-choice deltas (ChoiceDelta), then the usage (Usage), then, when the
request captured the residual stream, the activations (Activations). The app
builds both the Completion and the stream from the same events, so the text
of a stream equals the text without stream by construction.

The fake engine (mock_server/engine/fake_engine.py) and the reference implementation's
vLLM engine implement this protocol; the mock's simulated latency and stream errors
are an engine too (mock_server/hook/faults.py's Simulated, wrapping the app's engine for
one request), and tests/conformance/test_third_engine.py writes a third in a few lines.
"""

from __future__ import annotations

import errno
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from api_server.pacing import Pump, batched
from contract import ApiError, CompletionRequest


# The events are made once per token and only read after: not frozen, since a frozen
# dataclass's __init__ sets each field through object.__setattr__ (a ChoiceDelta took
# 0.8 us to make, 0.3 us now).
@dataclass(slots=True)
class LogprobsDelta:
    """OpenAI's logprobs lists for the tokens of one delta; text_offset counts
    from the start of the choice's whole text (echoed prompt included)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


@dataclass(slots=True)
class ChoiceDelta:
    """The next piece of one choice. finish_reason is set on its last delta only."""

    index: int  # prompt_index * n + choice
    text: str
    token_ids: list[int] = field(default_factory=list)  # generated ids in this delta
    logprobs: LogprobsDelta | None = None
    finish_reason: str | None = None  # "stop" | "length"
    stop_reason: str | int | None = None  # the stop string or stop token id
    # Set on the first delta of a choice, when the request asked for them.
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[dict[str, dict[str, Any]] | None] | None = None


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class Activations:
    """vllm-lens's capture: `residual_stream` is already in the wire encoding."""

    layers: list[int]
    residual_stream: dict[str, Any]


Event = ChoiceDelta | Usage | Activations


class Dropped(ConnectionResetError):
    """Raised by an engine's stream to drop the connection: no error event, no [DONE], no
    end of the chunked body (the mock's X-Mock-Stream-Drop-After). The WSGI server closes
    the socket as for a client that reset it (gunicorn: quietly, for ECONNRESET)."""

    def __init__(self) -> None:
        super().__init__(errno.ECONNRESET, "the stream was dropped on request")


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """Ends a stream with `error`'s error event, then [DONE]; the last event of its batch.
    Raising `error` does the same once the stream has started, but before the stream's
    first batch a raised error is an HTTP error; an ErrorEvent is an event even there
    (the mock's X-Mock-Stream-Error-After: 0)."""

    error: ApiError


# What a stream's batches hold: the events, and at most one ErrorEvent, last.
StreamEvent = Event | ErrorEvent
# A stream: its batches as they come (Engine.stream); the app closes it when the client goes away.
Batches = Generator[Sequence[StreamEvent], None, None]


class Engine(ABC):
    """What every engine offers. `generate` is the one method an engine must write; the
    rest is declared here with defaults that fit any engine, and an engine overrides
    what it can do better (the reference's `stream` and `ready`, the fake engine's
    `never_waits`). The app calls nothing else, and nothing is looked up at run time."""

    # True for an engine whose events never wait on anything (the fake engine): the
    # default `stream` then runs `generate` in the request's own thread or greenlet. An
    # engine that may block (vLLM) leaves it False, and its stream runs `generate` in a
    # pump thread (a greenlet under gevent), so that a quiet stream still sends keepalives.
    never_waits: ClassVar[bool] = False

    @abstractmethod
    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        """Run `req` (its max_tokens the Hold's, maybe clamped): deltas, then Usage,
        then Activations when captured. May raise contract.ApiError (e.g. 503): the client
        gets it as an HTTP error with its status. The app runs a request without stream
        through this; a stream through `stream`."""

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        """A stream's events in lists as they come, [] for each `interval` seconds without
        one (the app sends a keepalive for each), never waiting longer than that at a
        time; events in one list leave in one write. What it raises before its first
        list is an HTTP error with its status; after it, an error event, then [DONE]. The
        app closes the generator when the client goes away.

        By default `generate` in lists: in the request's thread when the engine
        `never_waits`, else in a pump. An engine that can wait with a bound itself
        (the reference's, which reads vLLM so) overrides it."""
        if self.never_waits:
            return batched(self.generate(req, request_id))
        return Pump(lambda sleep: self.generate(req, request_id), interval).batches()

    def ready(self) -> bool:
        """Whether the engine can serve now (GET /health): an engine with an upstream (the
        reference's vLLM) is ready when that upstream is."""
        return True
