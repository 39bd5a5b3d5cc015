"""POST /v1/completions: parse, validate through the core, hold the Budget, run
the engine, serialise (a Completion, or a stream of chunks)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any, cast

from flask import Response, g, request
from werkzeug.wsgi import get_content_length

from api_server.engine import Batches, Dropped, Engine, ErrorEvent, Event, StreamEvent
from api_server.responses import (
    CLAMPED,
    DONE,
    JSON,
    KEEPALIVE,
    Assembler,
    Meta,
    completion_id,
    dumps,
    sse,
)
from api_server.state import State, state
from contract import (
    ApiError,
    CompletionRequest,
    Hold,
    InsufficientQuota,
    InternalError,
    InvalidRequest,
    RequestTooLarge,
    parse_json,
)
from contract.errors import Errors

log = logging.getLogger("api_server")

READ_SIZE = 1 << 16


def create_completion() -> Response:
    s = state()
    rid: str = g.request_id
    key: str = g.api_key  # preflight's: this route needs a key
    req = s.contract.validate_completion(
        parse_json(read_body(s.contract.api.caps["max_body_bytes"])), s.models
    )
    engine = s.engine if s.hook is None else s.hook.engine(request.headers, req, s.engine)
    try:
        held = s.budget.reserve(key, req)
    except InsufficientQuota:
        s.metrics.budget_refused.inc()
        raise
    if held.max_tokens != req.max_tokens:  # the Budget clamped it: what runs is the Hold's
        req = dataclasses.replace(req, max_tokens=held.max_tokens)
    run = _Run(s, engine, req, rid, key, held)
    headers = {CLAMPED: str(held.max_tokens)} if held.clamped else {}
    return _open_stream(run, headers) if req.stream else _complete(run, headers)


class _Run:
    """One admitted request: its engine, what its events add up to, and its Hold."""

    def __init__(
        self, s: State, engine: Engine, req: CompletionRequest, rid: str, key: str, held: Hold
    ) -> None:
        self.s, self.engine, self.req, self.rid, self.key, self.held = (
            s,
            engine,
            req,
            rid,
            key,
            held,
        )
        self.asm = Assembler(req, Meta(completion_id(rid, s.contract.api), req.body["model"]))
        self._settled = False

    def settle(self) -> None:
        if not self._settled:  # once, whether the stream ended, failed or was never read
            self._settled = True
            self.s.budget.settle(self.key, self.held, self.asm.used)
            metrics = self.s.metrics
            metrics.generated_tokens.inc(self.asm.completion_tokens)
            if self.s.config.budget_tokens is not None:
                metrics.budget_spent.inc(self.asm.used)


def _complete(run: _Run, headers: dict[str, str]) -> Response:
    try:
        for event in run.engine.generate(run.req, run.rid):
            run.asm.feed(event)
    finally:
        run.settle()
    return Response(dumps(run.asm.completion()), content_type=JSON, headers=headers)


def _open_stream(run: _Run, headers: dict[str, str]) -> Response:
    """The engine's stream starts now, and the route waits for its first batch (at most
    one keepalive interval: Engine.stream's contract) before answering. So an engine
    that fails before its first event (vLLM down: 503 inference_unavailable) gets an
    HTTP error with its status, not a 200 stream with an error event; and a slow first
    token (the mock's simulated TTFT, or a real one) still gets `: keepalive` on time:
    the wait ends after one interval with an empty batch, which the stream sends as its
    first keepalive, as it always did (a WSGI server sends the headers with the first
    body write anyway). An error after the first batch is an error event."""
    first: Sequence[StreamEvent] | None
    try:
        batches = run.engine.stream(run.req, run.rid, run.s.config.stream_interval)
        try:
            first = next(batches)
        except StopIteration:  # the engine ended without an event: [DONE] alone
            first = None
    except BaseException:
        run.settle()
        raise
    keepalive = KEEPALIVE if run.s.config.keepalive else None  # 0 s: off, as in vLLM
    body = _stream(run.asm, first, batches, run.settle, run.rid, keepalive, run.s.contract.errors)
    run.s.metrics.open_streams.inc()
    response = Response(
        body,
        mimetype="text/event-stream",
        headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    # The body may never be read (the client left first): closing the batches stops the
    # engine (a pump's thread, vLLM's request); the body's own close does it when it was read.
    response.call_on_close(batches.close)
    response.call_on_close(run.settle)
    response.call_on_close(run.s.metrics.open_streams.dec)
    return response


def read_body(limit: int) -> bytes:
    """The body, cut off at the cap (`limit`: x-caps.max_body_bytes). preflight has refused a Content-Length over the
    cap; a chunked body (no Content-Length) is only known to be too large here.
    With a Content-Length, the first read asks for all of it, and usually gets it.
    A body shorter than its Content-Length, or one that sends nothing for
    x-caps.body_read_seconds, is malformed HTTP: never executed, and the connection closes."""
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
            except RequestTooLarge:  # a chunk declared past the cap (worker.BoundedChunks)
                raise
            except Exception:
                # A broken transfer (bad chunked framing, a body shorter than its Content-Length
                # under werkzeug, a stall past the bound). The WSGI server's own exception types
                # stay out of the app.
                log.info("unreadable request body", exc_info=True)
                raise _malformed() from None
            if not body and length is not None and len(chunk) == length:
                return chunk  # the whole body in one read: no copy into `body`
            if not chunk:
                if (
                    length is not None
                ):  # the client closed before Content-Length (gunicorn reads b"")
                    raise _malformed()
                return bytes(body)
            body += chunk
            if length is not None and len(body) == length:
                return bytes(body)
    raise RequestTooLarge.from_template("request_too_large", limit=limit)


def _malformed() -> InvalidRequest:
    g.close_connection = True  # where the next request would start is unknown
    return InvalidRequest.from_template("malformed_http")


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
    if prior == bound:  # the gevent worker bounds every read of the connection already
        yield
        return
    sock.settimeout(bound)
    try:
        yield
    finally:
        try:
            sock.settimeout(prior)
        except OSError:  # the client is gone
            pass


def _stream(
    asm: Assembler,
    first: Sequence[StreamEvent] | None,
    batches: Batches,
    settle: Callable[[], None],
    rid: str,
    keepalive: bytes | None,
    errors: Errors,
) -> Iterator[bytes]:
    """The SSE body: `first` (the batch the route already read; None when there was
    none), then the rest of `batches`. Events that are ready together leave in one write;
    `keepalive` (a comment; None: nothing) fills each quiet interval; an error after the
    start (raised, or an ErrorEvent) is an error event."""
    out: list[bytes] = []
    try:
        for batch in chain([] if first is None else [first], batches):
            if not batch:
                if keepalive is not None:
                    yield keepalive
                continue
            failure = batch[-1] if isinstance(batch[-1], ErrorEvent) else None  # (once a batch)
            for event in cast("list[Event]", batch if failure is None else batch[:-1]):
                asm.feed(event)
                chunk = asm.chunk(event)
                if chunk is not None:
                    out.append(chunk)
            if failure is not None:
                # Answered, not raised: raised, its traceback would hold this frame, and the
                # frame `failure`, which holds it: a cycle left to the gc, for every such stream.
                yield _ending(out, errors.body(failure.error, rid))
                return
            yield b"".join(out)
            out.clear()
        yield DONE
    except Dropped:  # to the WSGI server, which closes the connection mid-body
        raise
    except ApiError as error:
        yield _ending(out, errors.body(error, rid))
    except Exception:
        log.exception("internal error in the stream of %s", rid)
        yield _ending(out, errors.body(InternalError.from_template("internal_error"), rid))
    finally:
        batches.close()
        settle()


def _ending(out: list[bytes], error_body: dict[str, Any]) -> bytes:
    """The last write of a stream that fails: the chunks so far, the error event, [DONE]."""
    return b"".join(out) + sse(error_body) + DONE
