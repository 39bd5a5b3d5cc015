"""The engine protocol (api_server/engine.py) over vLLM's OpenAI server, by HTTP.

Why HTTP to a vLLM server, not vLLM's async engine in this process:
- The API layer stays in the project's own interpreter (Flask under gunicorn,
  like the mock), and vLLM in its own (torch, its pinned dependencies, its
  processes); neither pins the other's packages, and the API starts in a second.
- vLLM's server already does what the API needs from Inference: the prompts'
  renderer, vllm-lens's plugin (which patches that server), request ids,
  metrics, and abort on disconnect. Running AsyncLLM in process would mean
  rebuilding that server, and an asyncio loop inside gunicorn's threads.
- The same engine fronts a vLLM that runs elsewhere (`--upstream URL`).

Why vLLM streams exactly when the client's request streams: then each token
reaches the API as vLLM makes it, so the API's stream has real deltas, the app
sends its keepalive between them, and closing vLLM's response before its end
(the client went away, the app closed the engine's iterator) closes the
connection, which makes vLLM abort the request; a stream read to its end keeps
its connection for the next request. A request without stream gains none of this (the app
answers once, at the end, and a WSGI app does not see a client leave before
it answers), while vLLM's stream cost it about 1 ms per token here (a 16-token
completion took 14 ms longer than vLLM's own; now 1-4 ms, bench/results/
reference.md): so it is one request and one answer. The
deadline is the same either way: the read timeout is the API's wait, and
vLLM sends nothing before it is done. (vLLM computes prompt_logprobs only
without stream, and the API refuses them with stream.)

How: the reference's one client to vLLM (wire.py: httptools' parser, and reads that
wait at most a keepalive interval), so the app reads a stream in the request's own
greenlet through `stream`, with no pump and no hand-off per token, and what one read
from vLLM brings leaves in one write. Foreign exceptions (wire.py's, and vLLM's error
bodies) become the API's errors in one place, reference_impl/errors.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator

import orjson

from api_server.engine import Batches, Engine, Event
from api_server.responses import REQUEST_ID, dumps
from contract import CompletionRequest, Spec
from reference_impl.errors import UpstreamError, from_vllm, translated
from reference_impl.events import Decoder, SseData
from reference_impl.health import UpstreamHealth
from reference_impl.upstream import upstream_body
from reference_impl.wire import Exchange, Pool, WireTimeout

COMPLETIONS = "/v1/completions"  # vLLM's OpenAI route (not ours: the upstream's)
CONNECT_TIMEOUT_S = 5.0
DRAIN_CHUNKS = 4  # chunks read after `[DONE]` at most (the body's end, so the connection is kept)
# A kept-alive connection to vLLM is dropped after this many idle seconds, before vLLM's
# uvicorn closes it (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by default): at 5 s a request could be
# sent on a connection that vLLM was closing at that moment, and fail.
KEEPALIVE_EXPIRY_S = 3.0


class VllmEngine(Engine):
    """The engine protocol over vLLM at `base_url`, which serves the model as `model`. Its
    `stream` reads vLLM with a bounded wait, and it is `ready` when vLLM is."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        wait_seconds: float | None = None,
        api: Spec,
        pool_size: int = 64,
        isolate_steering: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        # The API's wait for Inference: the longest vLLM may stay silent (without stream,
        # vLLM says nothing before it is done, so that is the whole request's time).
        self.api = api
        self.wait_seconds = float(
            wait_seconds if wait_seconds is not None else api.caps["wait_seconds"]
        )
        # Kept-alive connections to vLLM: as many as the worker serves requests at once,
        # so that a burst of streams does not open (and then drop) a connection each.
        self.pool_size = pool_size
        # False only in tests: a steered request's KV blocks then reach plain requests (upstream.py)
        self.isolate_steering = isolate_steering
        self._wire = Pool(
            self.base_url,
            connect_timeout=CONNECT_TIMEOUT_S,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
            max_idle=pool_size,
        )
        self.health = UpstreamHealth(self.base_url)

    def ready(self) -> bool:
        """The upstream's readiness (its GET /health, cached briefly): the API's /health."""
        return self.health.ready()

    def close(self) -> None:
        self._wire.close()

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        """Engine.stream, read in the caller's thread or greenlet (no pump, no hand-off per
        token): the events of one read from vLLM come in one list (the app writes them at
        once). A request without stream gets the default (a pump over generate)."""
        if not req.stream:
            return super().stream(req, request_id, interval)
        return self._wire_batches(req, request_id, interval)

    def _post(self, req: CompletionRequest, request_id: str) -> Exchange:
        body = upstream_body(req, self.model, self.api, isolate_steering=self.isolate_steering)
        return self._wire.post(COMPLETIONS, dumps(body), _headers(request_id), self.wait_seconds)

    def _wire_completion(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        """Without stream: one answer, vLLM's Completion (or its error)."""
        with translated(self.wait_seconds):
            exchange = self._post(req, request_id)
            try:
                answer = exchange.read_all()
                if exchange.status != 200:
                    raise from_vllm(exchange.status or 0, vllm_json(answer), self.api)
                events = Decoder(req, self.api).chunk(vllm_json(answer), whole=True)
            finally:
                exchange.close()
        yield from events

    def _wire_batches(
        self, req: CompletionRequest, request_id: str, interval: float
    ) -> Generator[list[Event], None, None]:
        decoder = Decoder(req, self.api)
        sse = SseData()
        with translated(self.wait_seconds):
            exchange = self._post(req, request_id)
            # Something leaves at most `interval` after the last thing did: events, or a keepalive.
            due = time.monotonic() + interval
            try:
                while True:
                    status = exchange.status  # None until vLLM's head is in
                    if status is not None and status != 200:
                        raise from_vllm(status, vllm_json(exchange.read_all()), self.api)
                    batch: list[Event] = []
                    try:
                        for piece in exchange.take():
                            for data in sse.feed(piece):
                                batch += decoder.chunk(vllm_json(data))
                    except Exception:  # an error event: the events before it leave first
                        if batch:
                            yield batch
                        raise
                    if sse.done:
                        # The body's end (its last, empty chunk), so the connection is kept;
                        # an upstream that goes on loses its connection instead.
                        for _ in range(DRAIN_CHUNKS):
                            try:
                                if exchange.complete or not exchange.read(self.wait_seconds):
                                    break
                            except (
                                WireTimeout
                            ):  # silent after [DONE]: the stream stands, its connection goes
                                break
                            exchange.take()
                        if batch:
                            yield batch
                        return
                    if exchange.complete:  # (the events before the cut leave first)
                        if batch:
                            yield batch
                        raise UpstreamError("the stream ended without data: [DONE]")
                    if batch:
                        yield batch
                        due = time.monotonic() + interval
                    if not exchange.read(due - time.monotonic()):
                        yield []
                        due = time.monotonic() + interval
            finally:
                exchange.close()

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        if not req.stream:
            yield from self._wire_completion(req, request_id)
            return
        # (a wrapper of the engine may run a stream so)
        batches = self._wire_batches(req, request_id, self.wait_seconds)
        try:
            for batch in batches:
                yield from batch
        finally:
            batches.close()  # closed early (the client left): vLLM's connection closes now


def vllm_json(raw: bytes) -> object:
    """vLLM's JSON (a chunk per token: orjson parses one in a third of json's time). What
    orjson refuses and json takes (NaN, lone surrogates, UTF-16) goes to json, so what
    parses is what json.loads parses, to the same values, but for integers past 64 bits,
    which orjson reads as floats (vLLM's are token ids, counts and timestamps)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(raw)
    except ValueError:
        raise UpstreamError(f"not JSON: {raw[:200]!r}") from None


def _headers(request_id: str) -> dict[str, str]:
    # vLLM names its request cmpl-{X-Request-Id}-{prompt}; vllm-lens finds a request's
    # steering and capture by that prefix, so the id is always the API's own.
    return {REQUEST_ID: request_id, "Content-Type": "application/json"}
