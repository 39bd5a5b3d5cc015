"""HTTP to the server under test: every exchange recorded, every request priced and every
generated token counted by the run's ledger (conformance.wire.ledger).

Transport failures are translated here, once: a request that got no HTTP
response becomes a Reply with `error` set, which a check reports as a finding
(the server was reachable when the run started, so silence is its fault), and is
charged at its price (it may have generated all of it).

A connection closed or reset before an answer is sent again once, on a new connection,
and the drop is a finding of the check that sent it (`resends`), the lost attempt
charged at its price. A connection that answered a 5xx is not used again: a server that
drops it under the next request without saying so (llama.cpp after a bare 500) would
otherwise have its drop found on whichever check sent that request.

A deployment's rate limit is met here, once (`Pace`, `Client.paced`): with --rate-limit
every request (the raw sockets' and schemathesis's too) waits its turn, and a 429 with
Retry-After is waited out and sent again, at most MAX_RETRIES times a request, MAX_WAIT_S a
wait and a bound for the run (RETRY_FLOOR, RETRY_EVERY): every report counts the retries, and a
run whose server forced more is not proven (engine.results.exit_code). The API's own 429
(insufficient_quota) never carries Retry-After, so no check's expected answer is retried.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from conformance.wire import jsontext
from conformance.wire.exchange import Exchange, quote
from conformance.wire.ledger import Ledger, OverCeiling, may_have_generated
from conformance.wire.rows import RowSizes
from conformance.wire.sdk import client_headers
from conformance.wire.secrets import MASKED, MIN_SECRET, SECRETS
from conformance.wire.sse import Parsed, parse_lines
from conformance.wire.twins import Twins

AUTH_DEFAULT = "default"
AUTH_NONE = "none"


# httpcore's words for a connection closed before an answer, and the kernel's for one reset
DROPPED = ("disconnected without sending a response", "Connection reset by peer")
MAX_RETRIES = 5  # a request's 429s with Retry-After waited out, at most
MAX_WAIT_S = 60.0  # the longest Retry-After waited out; a longer one is answered as it came
# The run's retries, at most RETRY_FLOOR plus one for every RETRY_EVERY requests sent (first
# attempts): under --rate-limit the suite keeps to the deployment's rate, so a server that answers
# 429 to more (every first attempt) has its 429s stand as answers (findings of their checks) past
# the bound, and the run is not proven.
RETRY_FLOOR, RETRY_EVERY = 10, 2


IDENTITY = "identity"  # an answer as sent: its size its cost
# The codings an answer may come in and how zlib reads each (its wbits): the SDK accepts gzip and
# deflate, and so does the gate, decoding within the byte bound (never a codec's own whole-chunk
# decode, which a gzip bomb turns into a thousandfold of the bytes read). deflate: zlib's
# wrapping, or raw deflate as some servers send it.
CODINGS = {"gzip": (16 + zlib.MAX_WBITS,), "deflate": (zlib.MAX_WBITS, -zlib.MAX_WBITS)}


class AnswerPastBounds(httpx.ReadError):
    """An answer read past the most bytes, or the longest time, the suite gives one: a server
    that never stops sending (or trickles forever) gets no more of the run's memory or time.
    A ReadError, so it is what any failed read is: no answer, a finding of the check."""


class _Decoder:
    """One coded answer decoded as it comes, never more than `room` bytes out at a time."""

    def __init__(self, coding: str) -> None:
        self.wbits = list(CODINGS[coding])
        self.zlib = zlib.decompressobj(self.wbits.pop(0))
        self.started = False

    def decode(self, chunk: bytes, room: int) -> bytes:
        try:
            # at most room + 1 out: past the bound either way, and zlib keeps the rest unread
            out = self.zlib.decompress(chunk, room + 1)
        except zlib.error as exc:
            if self.started or not self.wbits:
                raise httpx.DecodingError(f"the answer's coding does not decode: {exc}") from exc
            self.zlib = zlib.decompressobj(self.wbits.pop(0))
            return self.decode(chunk, room)
        self.started = self.started or bool(out)
        return out


class _Bounded(httpx.SyncByteStream):
    def __init__(
        self, stream: httpx.SyncByteStream, most_bytes: int, deadline: float, coding: str
    ) -> None:
        self.stream, self.most_bytes, self.deadline = stream, most_bytes, deadline
        self.decoder = None if coding == IDENTITY else _Decoder(coding)

    def __iter__(self) -> Iterator[bytes]:
        read = kept = 0
        for chunk in self.stream:
            read += len(chunk)
            if self.decoder is not None:
                chunk = self.decoder.decode(chunk, self.most_bytes - kept)
            kept += len(chunk)
            if max(read, kept) > self.most_bytes:
                raise AnswerPastBounds(
                    f"the answer went past {self.most_bytes} bytes; the suite stopped reading"
                )
            if time.monotonic() > self.deadline:
                raise AnswerPastBounds(
                    "the answer went on past the suite's wait; the suite stopped reading"
                )
            if chunk:
                yield chunk

    def close(self) -> None:
        self.stream.close()


def answer_bounds(caps: Mapping[str, int], timeout: float) -> tuple[int, float]:
    """The most bytes and seconds the suite reads one answer for (x-caps): the largest answer
    it asks for is a capture at capture_elements (4-byte values, base64) beside a body's worth
    of the rest; and the API answers within wait_seconds (then 504), plus a read's timeout. A
    server past either is not answering (the answer's check reports it)."""
    capture = -(-4 * caps["capture_elements"] // 3) * 4
    return capture + caps["max_body_bytes"], caps["wait_seconds"] + timeout


class BoundedTransport(httpx.BaseTransport):
    """A transport whose answers are read up to `most_bytes` bytes, raw and decoded, and for at
    most `most_seconds` from the request (httpx's custom transport: it wraps the real one). A
    coded answer is decoded here, within the bound, and handed on as the bytes it decodes to; one
    in a coding the request did not accept is no answer."""

    def __init__(self, inner: httpx.BaseTransport, most_bytes: int, most_seconds: float) -> None:
        self.inner, self.most_bytes, self.most_seconds = inner, most_bytes, most_seconds

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.most_seconds
        response = self.inner.handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        coding = response.headers.get("content-encoding", IDENTITY).strip().lower()
        accepted = request.headers.get("accept-encoding", IDENTITY)
        if coding != IDENTITY and (
            coding not in CODINGS or coding not in {c.strip() for c in accepted.split(",")}
        ):
            response.close()
            raise AnswerPastBounds(
                f"the answer is compressed ({coding[:40]}) though the suite asked for "
                f"Accept-Encoding: {accepted}; the suite did not read it"
            )
        headers = response.headers.copy()
        if coding != IDENTITY:  # decoded here: httpx must not decode it again
            del headers["content-encoding"]
            headers.pop("content-length", None)
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_Bounded(response.stream, self.most_bytes, deadline, coding),
            extensions=response.extensions,
            request=request,
        )

    def close(self) -> None:
        self.inner.close()


class Pace:
    """At most `per_second` requests a second, and the 429s waited out (the report's note)."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self._lock = threading.Lock()
        self._next = 0.0
        self.retried = 0
        self.turns = 0  # requests sent, retries included
        self.waited = 0.0
        self.given_up: list[str] = []
        self.past_bound = 0  # 429s not retried because the run's retries reached their bound

    @property
    def bound(self) -> int:
        return RETRY_FLOOR + (self.turns - self.retried) // RETRY_EVERY

    def wait(self) -> None:
        with self._lock:
            self.turns += 1
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + 1.0 / self.per_second
        if at > now:
            time.sleep(at - now)

    def retry_after(
        self, status: int | None, headers: Mapping[str, str], tries: int, what: str
    ) -> float | None:
        """Seconds to wait before sending again, or None: this answer stands."""
        value = {k.lower(): v for k, v in headers.items()}.get("retry-after")
        if status != 429 or value is None:
            return None
        try:
            seconds = max(0.0, float(value))
        except ValueError:
            seconds = MAX_WAIT_S + 1
        with self._lock:
            if self.retried >= self.bound:
                self.past_bound += 1
                self.given_up.append(
                    f"{what}: 429 with Retry-After {value}: the run's {self.retried} retries "
                    "reached their bound"
                )
                return None
            if tries >= MAX_RETRIES or seconds > MAX_WAIT_S:
                self.given_up.append(f"{what}: 429 with Retry-After {value} after {tries} retries")
                return None
            self.retried += 1
            self.waited += seconds
        return seconds

    def summary(self) -> dict[str, object]:
        return {
            "per_second": self.per_second,
            "retried": self.retried,
            "sent": self.turns,
            "bound": self.bound,
            "past_bound": self.past_bound,
            "waited_s": round(self.waited, 3),
            "max_retries": MAX_RETRIES,
            "max_wait_s": MAX_WAIT_S,
            "given_up": self.given_up,
        }


R = TypeVar("R")  # an answer of any sender: httpx's, requests' (schemathesis's), a raw exchange's


def _status_and_headers(resp: Any) -> tuple[int | None, Mapping[str, str]]:
    return resp.status_code, resp.headers


def _keep(resp: Any) -> None:
    """A read answer holds nothing to free."""


# Idle connections the client closes itself, well before a server's idle timeout (gunicorn's
# 5 s, uvicorn's 5 s, nginx's 75 s): a server that closes an idle connection as a request
# goes out on it would otherwise look like one that drops requests.
KEEPALIVE_EXPIRY_S = 1.0


@dataclass(frozen=True)
class Resend:
    """A request whose connection was closed or reset before an answer, sent again; the lost
    attempt charged at `charged`."""

    exchange: Exchange
    error: str
    charged: int


def _no_reuse_after_5xx(resp: httpx.Response) -> None:
    """A 5xx's connection is closed once its answer is read (httpcore's `network_stream`
    extension): the pool then opens a new one for the next request."""
    if resp.status_code >= 500:
        stream = resp.extensions.get("network_stream")
        if stream is not None:
            stream.close()


def _json(content: bytes | None) -> Any:
    try:
        return json.loads(content) if content else None
    except (ValueError, RecursionError):
        return None


def masked_headers(headers: httpx.Headers) -> httpx.Headers:
    """An answer's headers, the run's secrets masked (conformance.wire.secrets)."""
    return httpx.Headers([(k, SECRETS(v)) for k, v in headers.multi_items()])


def _shown(data: bytes | str | None) -> str | None:
    return None if data is None else quote(data)


@dataclass
class Reply:
    exchange: Exchange
    status: int | None
    headers: httpx.Headers
    content: bytes = b""
    data: Any = None  # the parsed JSON body, when it is JSON
    is_json: bool = False
    error: str | None = None  # no HTTP response

    @property
    def request_id_header(self) -> str | None:
        return self.headers.get("x-request-id")


@dataclass
class StreamReply(Reply):
    lines: list[tuple[float, str]] = field(default_factory=list)
    parsed: Parsed = field(default_factory=Parsed)
    closed_early: bool = False


class Client:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
        rate_limit: float | None = None,
        bounds: tuple[int, float] | None = None,
    ) -> None:
        """`bounds`: the most bytes and seconds one answer is read for (BoundedTransport)."""
        self.base_url = base_url.rstrip("/")
        self.pace = Pace(rate_limit) if rate_limit else None
        self.api_key = api_key
        inner = transport or httpx.HTTPTransport(
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
        )
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=inner if bounds is None else BoundedTransport(inner, *bounds),
            headers=client_headers(),  # a client's (the openai SDK's), Accept-Encoding too
        )
        self.in_process = (
            transport is not None
        )  # no socket: what sends by itself (schemathesis) reaches nothing
        self._lock = threading.Lock()
        self.ledger = Ledger()  # every request priced before it goes, every answer counted
        self.resends: list[Resend] = []
        self.twins: Twins | None = None  # plain answers held to counted twins (the runner's)
        self.rows: RowSizes | None = None  # every answer's logprob rows held (the runner's)
        # Called with (method, path, request body, reply) after every answer (spec coverage).
        self.observers: list[Callable[[str, str, bytes | None, Reply], None]] = []
        # ... and after an answer to bytes sent on a raw socket: (method, path, body, status,
        # headers, parsed JSON body or None).
        self.raw_observers: list[Callable[[str, str, bytes, int, Any, Any], None]] = []

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building requests -------------------------------------------------

    def _headers(
        self, auth: str | None, headers: dict[str, str] | None, has_body: bool
    ) -> dict[str, str]:
        out: dict[str, str] = {}
        if has_body:
            out["Content-Type"] = "application/json"
        if auth == AUTH_DEFAULT:
            out["Authorization"] = f"Bearer {self.api_key}"
        elif auth not in (None, AUTH_NONE):
            out["Authorization"] = auth
        out.update(headers or {})
        # HTTP drops whitespace around a field value (RFC 9110 5.5) and h11 refuses to
        # send it, so "Bearer " goes out as "Bearer": the same header on the wire.
        return {k: v.strip() for k, v in out.items()}

    def _exchange(
        self, method: str, path: str, headers: dict[str, str], content: bytes | None
    ) -> Exchange:
        # the key wherever it was sent (its curl line reads it from the environment); a key too
        # short to tell from the words around it, only in Authorization
        def mask(name: str, value: str) -> str:
            hides = self.api_key and (
                name.lower() == "authorization" or len(self.api_key) >= MIN_SECRET
            )
            return value.replace(self.api_key, MASKED) if hides else value

        return Exchange(
            method,
            self.base_url + path,
            {k: mask(k, v) for k, v in headers.items()},
            _shown(content),
            sent=content,
        )

    @staticmethod
    def encode(body: Any) -> bytes:
        return json.dumps(body, separators=(",", ":")).encode()

    # -- plain requests ----------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: str | None = AUTH_DEFAULT,
        observe: bool = True,
    ) -> Reply:
        """Send one request; `body` is JSON-encoded, `content` is sent as is. `observe`: told to
        the observers (a counted twin, the gate's own, is not)."""
        if body is not None:
            content = self.encode(body)
        worst = self.ledger.reserve(method, path, content)
        hdrs = self._headers(auth, headers, content is not None)
        exchange = self._exchange(method, path, hdrs, content)
        try:
            resp = self.paced(
                lambda: self._again_if_dropped(
                    lambda: self._http.request(method, path, content=content, headers=hdrs),
                    exchange,
                    (method, path, content, None),
                ),
                f"{method} {path}",
                price=worst,
            )
        except httpx.TransportError as exc:
            exchange.error = f"{type(exc).__name__}: {exc}"
            self.ledger.add(worst)  # no answer: it may have generated all it could
            return Reply(exchange, None, httpx.Headers(), error=exchange.error)
        _no_reuse_after_5xx(resp)
        heard, answer = masked_headers(resp.headers), SECRETS.mask_bytes(resp.content)
        reply = Reply(exchange, resp.status_code, heard, answer)
        try:
            reply.data, reply.is_json = jsontext.loads(answer), True
        except (ValueError, RecursionError):  # not JSON, or nested past the decoder
            pass
        exchange.status = resp.status_code
        exchange.response_headers = dict(heard)
        exchange.response_body = _shown(answer)
        if resp.status_code == 200:
            self.ledger.count(reply.data if reply.is_json else None, content, worst, exchange)
        elif may_have_generated(resp.status_code):  # every attempt, whatever its status
            self.ledger.add(self.ledger.priced(worst))
        if observe:
            self._observe(method, path, content, reply)
        if resp.status_code == 200 and self.twins is not None and self._generating(method, path):
            self.twins.hold(self, path, body if body is not None else _json(content), reply)
        return reply

    def _generating(self, method: str, path: str) -> bool:
        cost = self.ledger.cost
        return method == "POST" and cost is not None and path.split("?", 1)[0] in cost.generating

    def twin(self, path: str, body: dict[str, Any]) -> Reply | None:
        """A counted twin of a plain answer (conformance.wire.twins), or None where the ledger
        does not let it go (the ceiling, a halt): counted like any request, observed by none."""
        try:
            return self.request("POST", path, body=body, observe=False)
        except OverCeiling:
            return None

    def post(self, path: str, body: Any, **kw: Any) -> Reply:
        return self.request("POST", path, body=body, **kw)

    # -- streams -----------------------------------------------------------

    def stream(
        self,
        path: str,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        auth: str | None = AUTH_DEFAULT,
        stop_after_events: int | None = None,
        on_event: Callable[[int], None] | None = None,
    ) -> StreamReply:
        """POST and read a text/event-stream line by line, timing each line.

        `stop_after_events` closes the connection after that many data events:
        the cheap way to see a large request accepted without paying for it.
        `on_event(k)` is called as the k-th data event arrives (a check that acts mid-stream).
        """
        content = self.encode(body)
        worst = self.ledger.reserve("POST", path, content, stop_after_events)
        hdrs = self._headers(auth, headers, True)
        exchange = self._exchange("POST", path, hdrs, content)
        start = time.monotonic()
        lines: list[tuple[float, str]] = []
        try:
            with self._paced_stream(path, content, hdrs, exchange, stop_after_events) as resp:
                reply = StreamReply(exchange, resp.status_code, masked_headers(resp.headers))
                exchange.status = resp.status_code
                exchange.response_headers = dict(reply.headers)
                if resp.status_code != 200 or "text/event-stream" not in resp.headers.get(
                    "content-type", ""
                ):
                    reply.content = SECRETS.mask_bytes(resp.read())
                    try:
                        reply.data, reply.is_json = jsontext.loads(reply.content), True
                    except (ValueError, RecursionError):
                        pass
                    exchange.response_body = _shown(reply.content)
                    if resp.status_code == 200:
                        self.ledger.count(
                            reply.data if reply.is_json else None, content, worst, exchange
                        )
                    elif may_have_generated(resp.status_code):
                        self.ledger.add(self.ledger.priced(worst))
                    self._observe("POST", path, content, reply)
                    return reply
                events = 0
                for line in resp.iter_lines():
                    line = SECRETS(line)
                    lines.append((time.monotonic() - start, line))
                    if line.startswith("data:"):
                        events += 1
                        if on_event is not None:
                            on_event(events)
                    if stop_after_events is not None and events >= stop_after_events and line == "":
                        reply.closed_early = True
                        break
        except httpx.TransportError as exc:
            exchange.error = f"{type(exc).__name__}: {exc}"
            if exchange.status is None:  # no answer: the suite never got to close it early
                worst = self.ledger.worst_case("POST", path, content)
            reply = StreamReply(
                exchange,
                exchange.status,
                httpx.Headers(exchange.response_headers),
                error=exchange.error,
            )
        reply.lines = lines
        reply.parsed = parse_lines(lines)
        reply.content = "\n".join(line for _, line in lines).encode()
        exchange.response_body = _shown(reply.content)
        self.ledger.count_stream(
            reply.parsed,
            content,
            worst,
            exchange,
            unfinished=reply.error is not None or reply.closed_early,
        )
        self._observe("POST", path, content, reply)
        return reply

    # -- the deployment's rate limit -----------------------------------------

    def wait_turn(self) -> None:
        """With --rate-limit, wait until the next request may go (every sender calls it)."""
        if self.pace is not None:
            self.pace.wait()

    def paced(
        self,
        send: Callable[[], R],
        what: str,
        *,
        first: R | None = None,
        answer: Callable[[R], tuple[int | None, Mapping[str, str]]] = _status_and_headers,
        discard: Callable[[R], None] = _keep,
        requests: int = 1,
        price: int = 0,
    ) -> R:
        """What `send` gets in its turn; with --rate-limit, a 429 with Retry-After within the
        bound is waited out and sent again (each try in its turn), `discard` freeing it.

        `first`: an answer already got in its turn (schemathesis's, from its own session);
        `answer`: its status (None: no HTTP answer) and headers; `requests`: how many requests
        one `send` writes (pipelined ones), each taking its turn; `price`: what an attempt
        answered 429 and sent again is charged (the server may have generated before its 429).
        """
        if first is None:
            for _ in range(requests):
                self.wait_turn()
            first = send()
        resp, tries = first, 0
        while self.pace is not None:
            status, headers = answer(resp)
            wait = self.pace.retry_after(status, headers, tries, what)
            if wait is None:
                break
            discard(resp)
            self.ledger.add(self.ledger.priced(price))
            tries += 1
            time.sleep(wait)
            for _ in range(requests):
                self.wait_turn()
            resp = send()
        return resp

    def _again_if_dropped(
        self,
        send: Callable[[], R],
        exchange: Exchange,
        priced: tuple[str, str, bytes | None, int | None],
    ) -> R:
        """send(), and once more on a new connection if the server closed or reset the connection
        before an answer: the drop a Resend (a finding of the check), the resend reserved like
        the first (`priced`: method, path, body and stop_after_events)."""
        try:
            return send()
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            if not any(words in str(exc) for words in DROPPED):
                raise
            method, path, content, stop_after_events = priced
            # Not a byte came back, so nothing was closed early: the lost attempt may have
            # generated all its request allows, whatever a stream closed early is priced at.
            lost = self.ledger.worst_case(method, path, content)
            self.ledger.add(lost)
            with self._lock:
                self.resends.append(Resend(exchange, f"{type(exc).__name__}: {exc}", lost))
            self.ledger.reserve(method, path, content, stop_after_events)
            return send()

    @contextlib.contextmanager
    def _paced_stream(
        self,
        path: str,
        content: bytes,
        hdrs: dict[str, str],
        exchange: Exchange,
        stop_after_events: int | None,
    ) -> Iterator[httpx.Response]:
        def send() -> httpx.Response:
            request = self._http.build_request("POST", path, content=content, headers=hdrs)
            return self._again_if_dropped(
                lambda: self._http.send(request, stream=True),
                exchange,
                ("POST", path, content, stop_after_events),
            )

        price = self.ledger.worst_case("POST", path, content, stop_after_events)
        resp = self.paced(send, f"POST {path}", discard=httpx.Response.close, price=price)
        try:
            yield resp
        finally:
            resp.close()
            _no_reuse_after_5xx(resp)

    def observe(self, method: str, path: str, content: bytes | None, reply: Reply) -> None:
        """An answer got through another client (schemathesis's), for the observers."""
        self._observe(method, path, content, reply)

    def _observe(self, method: str, path: str, content: bytes | None, reply: Reply) -> None:
        for observer in self.observers:
            observer(method, path, content, reply)
