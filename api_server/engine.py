"""The engine protocol: one method, and the events it yields.

An engine turns a validated request into events shaped like vLLM's output:
per-choice deltas (ChoiceDelta), then the usage (Usage), then, when the
request captured the residual stream, the activations (Activations). The app
builds both the Completion and the stream from the same events, so the text
of a stream equals the text without stream by construction.

The fake engine (fake_engine.py) and the reference implementation's vLLM
engine are two implementations of this protocol.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

from contract import CompletionRequest


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
    index: int                               # prompt_index * n + choice
    text: str
    token_ids: list[int] = field(default_factory=list)   # generated ids in this delta
    logprobs: LogprobsDelta | None = None
    finish_reason: str | None = None         # "stop" | "length"
    stop_reason: str | int | None = None     # the stop string or stop token id
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
        return {"prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


@dataclass(frozen=True)
class Activations:
    """vllm-lens's capture: `residual_stream` is already in the wire encoding."""
    layers: list[int]
    residual_stream: dict[str, Any]


Event = Union[ChoiceDelta, Usage, Activations]


class Engine(Protocol):
    # True for an engine whose events never wait on anything (the fake engine): its
    # stream runs in the request's thread or greenlet, which also waits out any
    # simulated latency and sends the keepalives. Engines that may block (vLLM) leave
    # it False and get a pump thread that sends keepalives.
    never_waits: bool = False
    # An engine may also offer `batches(req, request_id, interval)`: its stream's events
    # in lists as they come, [] for each `interval` seconds without one, waiting at most
    # that long at a time (the reference reads vLLM so). A stream then runs in the
    # request's thread or greenlet, with no pump thread and no hand-off per event.

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        """Run `req` (its max_tokens the Hold's, maybe clamped): deltas, then Usage,
        then Activations when captured. May raise contract.ApiError (e.g. 503): raised
        before the first event, the client gets it as an HTTP error with its status (a
        stream too, unless the first event takes longer than a keepalive interval); after
        it, a stream ends with an error event and [DONE]."""
        ...
