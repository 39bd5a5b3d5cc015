"""POST /v1/completions: parse, validate through the core, hold the Budget, run
the engine, serialise (a Completion, or a stream of chunks)."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any

from flask import Response, g, request
from werkzeug.wsgi import get_content_length

from api_server.engine import ChoiceDelta, Event
from api_server.hooks import PLAIN, Plan
from api_server.pacing import Pump
from api_server.responses import CLAMPED, DONE, JSON, KEEPALIVE, Assembler, Meta, completion_id, dumps, sse
from api_server.state import State, state
from contract import (
    ApiError, CompletionRequest, Hold, InternalError, InvalidRequest, RequestTooLarge, parse_json, spec,
    validate_completion,
)

log = logging.getLogger("api_server")

READ_SIZE = 1 << 16


def create_completion() -> Response:
    s = state()
    rid: str = g.request_id
    key: str = g.api_key   # preflight's: this route needs a key
    req = validate_completion(parse_json(read_body()), models=s.models)
    plan = s.hook.plan(request.headers, req) if s.hook is not None else PLAIN
    if plan.error is not None:
        raise plan.error
    held = s.budget.reserve(key, req)
    if held.max_tokens != req.max_tokens:   # the Budget clamped it: what runs is the Hold's
        req = dataclasses.replace(req, max_tokens=held.max_tokens)
    run = _Run(s, req, rid, key, held, plan)
    headers = {CLAMPED: str(held.max_tokens)} if held.clamped else {}
    return _open_stream(run, headers) if req.stream else _complete(run, headers)


class _Run:
    """One admitted request: its engine events, what they add up to, and its Hold."""

    def __init__(self, s: State, req: CompletionRequest, rid: str, key: str, held: Hold,
                 plan: Plan) -> None:
        self.s, self.req, self.rid, self.key, self.held, self.plan = s, req, rid, key, held, plan
        self.asm = Assembler(req, Meta(completion_id(rid), req.body["model"]))
        self._settled = False

    def events(self, sleep: Callable[[float], object]) -> Iterator[Event]:
        generated = self.s.engine.generate(self.req, self.rid)
        return generated if self.plan.pace is None else self.plan.pace(generated, sleep)

    def settle(self) -> None:
        if not self._settled:   # once, whether the stream ended, failed or was never read
            self._settled = True
            self.s.budget.settle(self.key, self.held, self.asm.used)


def _complete(run: _Run, headers: dict[str, str]) -> Response:
    try:
        for event in run.events(time.sleep):
            run.asm.feed(event)
    finally:
        run.settle()
    return Response(dumps(run.asm.completion()), content_type=JSON, headers=headers)


def _open_stream(run: _Run, headers: dict[str, str]) -> Response:
    """The engine starts now (in this thread when it never waits, else in a pump's
    thread), and the route waits for its first batch for at most one keepalive interval
    before answering. So an engine that fails
    before its first event (vLLM down: 503 inference_unavailable) gets an HTTP error with
    its status, not a 200 stream with an error event; and a slow first token (the mock's
    simulated TTFT, or a real one) still gets `: keepalive` on time: the wait ends after
    one interval with an empty batch, which the stream sends as its first keepalive, as
    it always did (a WSGI server sends the headers with the first body write anyway).
    An error after the first event, or after that first interval, is an error event."""
    s = run.s
    pump: Pump[Event] | None = None
    if getattr(s.engine, "never_waits", False):
        # The engine never waits (its only waits are the simulated latency, which
        # Schedule turns into waits between events): it runs in this thread or
        # greenlet, which sleeps and sends the keepalives itself. A pump thread
        # (a greenlet under gevent) and a hand-off per token cost more CPU than the
        # rest of a paced stream.
        events = s.engine.generate(run.req, run.rid)
        schedule: Schedule | None = None
        if run.plan.pace is not None:
            schedule = Schedule()
            events = run.plan.pace(events, schedule)
        batches = _inline_batches(events, schedule, s.config.keepalive_seconds)
    elif run.plan.pace is None and hasattr(s.engine, "batches"):
        # The engine waits at most a keepalive interval at a time itself (the reference's
        # vLLM stream): it runs in this thread or greenlet too, with no pump and no
        # hand-off per event.
        batches = s.engine.batches(run.req, run.rid, s.config.keepalive_seconds)
    else:
        pump = Pump(run.events, s.config.keepalive_seconds)
        batches = pump.batches()
    first: list[Event] | None
    try:
        first = next(batches)
    except StopIteration:   # the engine ended without an event: [DONE] alone
        first = None
    except BaseException:
        run.settle()
        raise
    body = _stream(run.asm, first, batches, run.settle, run.plan, run.rid)
    response = Response(body, mimetype="text/event-stream",
                        headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    if pump is not None:
        response.call_on_close(pump.cancelled.set)   # the body may never be read: stop the engine
    response.call_on_close(batches.close)   # (the body's own close closes them when it was read)
    response.call_on_close(run.settle)
    return response


def read_body() -> bytes:
    """The body, cut off at the cap. preflight has refused a Content-Length over the
    cap; a chunked body (no Content-Length) is only known to be too large here.
    With a Content-Length, the first read asks for all of it, and usually gets it.
    A body shorter than its Content-Length, or one that sends nothing for
    x-caps.body_read_seconds, is malformed HTTP: never executed, and the connection closes."""
    limit = spec().caps["max_body_bytes"]
    environ = request.environ
    length = get_content_length(environ)
    # A server that ends the input itself (gunicorn: at Content-Length, or after the last
    # chunk) is read as it is, as werkzeug's request.stream would; any other through werkzeug's guard.
    stream = environ["wsgi.input"] if environ.get("wsgi.input_terminated") else request.stream
    body = bytearray()
    with stall_bound(environ):
        while len(body) <= limit:
            size = READ_SIZE if length is None else max(length - len(body), 1)
            try:
                chunk = stream.read(min(size, limit + 1 - len(body)))
            except Exception:
                # A broken transfer (bad chunked framing, a body shorter than its Content-Length
                # under werkzeug, a stall past the bound). The WSGI server's own exception types
                # stay out of the app.
                log.info("unreadable request body", exc_info=True)
                raise _malformed() from None
            if not body and length is not None and len(chunk) == length:
                return chunk   # the whole body in one read: no copy into `body`
            if not chunk:
                if length is not None:   # the client closed before Content-Length (gunicorn reads b"")
                    raise _malformed()
                return bytes(body)
            body += chunk
            if length is not None and len(body) == length:
                return bytes(body)
    raise RequestTooLarge.from_template("request_too_large", limit=limit)


def _malformed() -> InvalidRequest:
    g.close_connection = True   # where the next request would start is unknown
    return InvalidRequest(spec().messages["malformed_http"])


@contextmanager
def stall_bound(environ: dict[str, Any]) -> Iterator[None]:
    """Each read of the body from the client's socket waits at most the server's
    body_read_seconds (x-caps.body_read_seconds unless configured): a stalled client would
    otherwise hold a thread for ever. The socket's timeout is restored for the response."""
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    if sock is None:
        yield
        return
    prior, bound = sock.gettimeout(), state().config.body_read_seconds
    if prior == bound:   # the gevent worker bounds every read of the connection already
        yield
        return
    sock.settimeout(bound)
    try:
        yield
    finally:
        try:
            sock.settimeout(prior)
        except OSError:   # the client is gone
            pass


INLINE_BATCH = 256   # events per write when the engine runs in the request's thread (Pump's maxsize)


class Schedule:
    """The `sleep` a paced engine runs with in the request's own thread: it only notes
    when the next event is due, and _inline_batches waits until then between events,
    with a keepalive for each quiet interval. The waits keep to one schedule from the
    request's start, as an engine's steps would (the writes between them do not add up);
    an event that is already late leaves at once, and the next step is due after it
    (no burst to catch up)."""

    def __init__(self) -> None:
        self.due = time.monotonic()

    def __call__(self, seconds: float) -> None:
        self.due += seconds


def _inline_batches(events: Iterator[Event], schedule: Schedule | None = None,
                    interval: float = 0.0) -> Generator[list[Event], None, None]:
    """`events` in lists of INLINE_BATCH, as Pump.batches gives them: what the
    iterator raises comes after the events before it, so only an error before the
    first event reaches the route's `next` (an HTTP error); a later one is an error event.
    With a `schedule`, an event not yet due ends the batch before it, and the wait for it
    (time.sleep: a greenlet's under gevent) yields [] for each `interval` without one."""
    batch: list[Event] = []
    try:
        for event in events:
            if schedule is not None:
                if batch and schedule.due > time.monotonic():
                    yield batch   # the events before it leave now
                    batch = []
                left = schedule.due - time.monotonic()   # after the write above
                while left > interval:
                    time.sleep(interval)
                    yield []
                    left = schedule.due - time.monotonic()
                if left > 0:
                    time.sleep(left)
                else:   # late (or not paced): the next step counts from now
                    schedule.due = time.monotonic()
            batch.append(event)
            if len(batch) == INLINE_BATCH:
                yield batch
                batch = []
    except Exception:
        if batch:
            yield batch
        raise
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    if batch:
        yield batch


def _stream(asm: Assembler, first: list[Event] | None, batches: Generator[list[Event], None, None],
            settle: Callable[[], None], plan: Plan, rid: str) -> Iterator[bytes]:
    """The SSE body: `first` (the batch the route already read; None when there was
    none), then the rest of `batches`. Events that are ready together leave in one write; a keepalive comment
    fills each quiet interval; an error after the start is an error event."""
    sent = 0
    error_after = plan.stream_error_after
    out: list[bytes] = []
    try:
        for batch in chain([] if first is None else [first], batches):
            if not batch:
                yield KEEPALIVE
                continue
            for event in batch:
                if isinstance(event, ChoiceDelta):
                    if error_after is not None and sent >= error_after and plan.stream_error is not None:
                        raise plan.stream_error
                    sent += 1
                asm.feed(event)
                chunk = asm.chunk(event)
                if chunk is not None:
                    out.append(chunk)
            yield b"".join(out)
            out.clear()
        yield DONE
    except ApiError as error:
        yield b"".join(out) + sse(error.body(rid)) + DONE
    except Exception:
        log.exception("internal error in the stream of %s", rid)
        yield b"".join(out) + sse(InternalError.from_template("internal_error").body(rid)) + DONE
    finally:
        batches.close()
        settle()
