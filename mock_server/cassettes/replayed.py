"""A recorded answer played back as the live mock would play the engine's: its X-Mock-* headers
mean the same (a forced status, latency, a stream's error, stall or drop after so many choice
deltas: `Faults.asked`), its times are bounded by the cassette's reader and scaled by
`--replay-speed`, and it is counted in the API's metrics (acs_requests, acs_generated_tokens).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from flask import Request

from api_server.engine import Dropped
from api_server.responses import sse
from api_server.state import State
from contract import ApiError, Errors
from mock_server.hook.faults import Asked, Faults

if TYPE_CHECKING:  # imported by create_app when it runs: api_server/metrics.py says why
    from api_server.metrics import ApiMetrics

DONE = b"data: [DONE]"
EVENT_END = b"\n\n"


def asked_of(
    state: State, environ: dict[str, Any], method: str, route: str | None, body: bytes
) -> Asked | None:
    """What a request's X-Mock-* headers (and the configured rates) ask of its answer, read as
    the live mock reads them of a completion request that validates (Faults.asked: a forced
    status raised, a bad header 400); None elsewhere: a request refused live is refused before
    any fault, and the recorded refusal stands as it is."""
    hook = state.hook
    completions = state.contract.api.completions_path
    if not isinstance(hook, Faults) or method != "POST" or route != completions:
        return None
    try:
        req = state.contract.validate_completion(json.loads(body), state.models)
    except (ApiError, ValueError, RecursionError):
        return None
    return hook.asked(Request(environ).headers, req)


def events(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """A recorded stream's bytes as its events (each with its blank line), comments included."""
    pending = b""
    for data in chunks:
        pending += data
        while EVENT_END in pending:
            event, pending = pending.split(EVENT_END, 1)
            yield event + EVENT_END
    if pending:
        yield pending


def is_delta(event: bytes) -> bool:
    """Whether an event is a choice's delta (a chunk with choices), as the engine counts them."""
    if not event.startswith(b"data: {"):
        return False
    try:
        data = json.loads(event[len(b"data: ") :])
    except ValueError:
        return False
    return isinstance(data, dict) and bool(data.get("choices"))


def faulted(
    chunks: Iterable[bytes], asked: Asked, errors: Errors, sleep: Callable[[float], Any]
) -> Iterator[bytes]:
    """A recorded stream with the stream faults `asked` applied after so many choice deltas: an
    error event then [DONE], a stall, or a dropped connection (Dropped); one at or past the last
    delta happens after it, before [DONE]. The latency is `paced`'s."""
    pending = sorted(asked.stream, key=lambda f: f.after)
    deltas = 0

    def fire(at_end: bool) -> bytes | None:
        """The faults due now, in order; the error event that ends the stream, if one is due."""
        while pending and (pending[0].after <= deltas or at_end):
            fault = pending.pop(0)
            if fault.drop:
                raise Dropped()
            if fault.stall_s:
                sleep(fault.stall_s)
            if fault.error is not None:
                return sse(errors.body(fault.error, errors.new_request_id())) + DONE + EVENT_END
        return None

    if (ending := fire(False)) is not None:
        yield ending
        return
    for event in events(chunks):
        if event.startswith(DONE) and (ending := fire(True)) is not None:
            yield ending
            return
        yield event
        if is_delta(event):
            deltas += 1
            if (ending := fire(False)) is not None:
                yield ending
                return


def paced(
    chunks: list[list[Any]],
    data_of: Callable[[list[Any]], bytes],
    asked: Asked | None,
    speed: float,
) -> tuple[list[float], list[bytes]]:
    """Each chunk's time and bytes: the header's latency where one asked for it (the first at
    its TTFT, each next a TPOT later), else the recorded time divided by `speed` (0: at once)."""
    data = [data_of(c) for c in chunks]
    if asked is not None and (asked.ttft_s or asked.tpot_s):
        return [asked.ttft_s + i * asked.tpot_s for i in range(len(data))], data
    return [c[0] / speed if speed else 0.0 for c in chunks], data


def played(
    times: list[float], data: list[bytes], began: float, sleep: Callable[[float], Any]
) -> Iterator[bytes]:
    for at, chunk in zip(times, data):
        wait = at - (time.monotonic() - began)
        if wait > 0:
            sleep(wait)
        yield chunk


def counted(metrics: ApiMetrics, route: str | None, status: int, chunks: list[bytes]) -> None:
    """A replayed answer in the API's metrics, as the live route counts it: its status and error
    code, and the completion tokens its usage says."""
    body = b"".join(chunks)
    code, tokens = "", 0
    if body.startswith(b"{"):
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict):
            error = data.get("error")
            code = str(error.get("code") or "") if isinstance(error, dict) else ""
            usage = data.get("usage")
            tokens = int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
    else:  # a stream: its usage chunk's count, or a token a delta (vLLM's stream)
        streamed = list(events([body]))
        tokens = sum(1 for e in streamed if is_delta(e))
        for event in streamed:
            if b'"usage"' in event and event.startswith(b"data: {"):
                try:
                    usage = json.loads(event[len(b"data: ") :]).get("usage")
                except ValueError:
                    continue
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    tokens = int(usage["completion_tokens"])
    metrics.responded(route, status, code)
    if tokens:
        metrics.generated_tokens.inc(tokens)
