"""Latency and faults on request, for client developers testing timeouts and retries.

The headers are documented in openapi.yaml (x-mock-headers), the statuses and
messages in x-mock-faults; this module only reads them. `Faults` is the hook the
mock's app is built with (api_server/hooks.py); the real API's has none. It answers
a forced status itself, and runs a request that asked for latency or a stream error
on `Simulated`: the app's engine, wrapped in them, for that request alone. The API
layer knows nothing of either: it runs the engine the hook gives it.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from api_server.arrival import received
from api_server.config import ConfigError
from api_server.engine import Batches, ChoiceDelta, Dropped, Engine, ErrorEvent, Event
from api_server.hooks import Headers
from contract import ApiError, CompletionRequest, InvalidRequest, Spec
from contract.errors import Message, error_class
from mock_server.config import MockConfig
from mock_server.hook.control import Control
from mock_server.hook.counts import SeenCounts
from mock_server.hook.latency import Paced, paced, paced_batches
from mock_server.hook.load import Loaded, Scheduler
from mock_server.hook.metered import Metered, RequestClock

if TYPE_CHECKING:  # (imported by create_app: api_server/metrics.py says why)
    from mock_server.hook.metrics import VllmMetrics

STATUS = "X-Mock-Status"
STREAM_ERROR_AFTER = "X-Mock-Stream-Error-After"
STREAM_ERROR_CODE = "X-Mock-Stream-Error-Code"
TTFT_MS = "X-Mock-Ttft-Ms"
TPOT_MS = "X-Mock-Tpot-Ms"
FAIL_FIRST = "X-Mock-Fail-First"
FAIL_KEY = "X-Mock-Fail-Key"
RETRY_AFTER = "X-Mock-Retry-After"
STALL_AFTER = "X-Mock-Stream-Stall-After"
STALL_MS = "X-Mock-Stall-Ms"
DROP_AFTER = "X-Mock-Stream-Drop-After"
GATEWAY = "X-Mock-Gateway"  # read in front of the API (mock_server/gateway.py)
_WHOLE = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")
HEADERS = (
    STATUS,
    STREAM_ERROR_AFTER,
    STREAM_ERROR_CODE,
    TTFT_MS,
    TPOT_MS,
    FAIL_FIRST,
    FAIL_KEY,
    RETRY_AFTER,
    STALL_AFTER,
    STALL_MS,
    DROP_AFTER,
    GATEWAY,
)


def check_spec(api: Spec) -> None:
    """Fail at start if the spec no longer documents a header this module reads."""
    documented = api.mock_headers
    missing = [h for h in HEADERS if h not in documented]
    if missing or not api.mock_faults:
        raise RuntimeError(f"openapi.yaml lacks the mock's headers {missing} or x-mock-faults")


def invalid(
    faults: dict[str, Any], header: str, expected: str, codes: tuple[str, ...] = ()
) -> InvalidRequest:
    text = faults["expected"][expected].format(
        statuses=", ".join(map(str, faults["statuses"])),
        codes=", ".join(codes),
        max_retry_after=faults["max_retry_after"],
        max_stall_ms=faults["max_stall_ms"],
    )
    return InvalidRequest(faults["invalid_header"].format(header=header, expected=text))


def _idle(faults: dict[str, Any], header: str, why: str) -> InvalidRequest:
    """A header that changes nothing in this request: refused, so that the test that sent it
    learns its fault never happens."""
    return InvalidRequest(faults["idle_header"].format(header=header, why=why))


def _first_code(api: Spec, status: int) -> str:
    """The code a forced status answers with: the first of x-error-codes with that status."""
    return next(c for c, v in api.error_codes.items() if v["status"] == status)


def _retry_after_applies(api: Spec, status: int | None) -> None:
    """X-Mock-Retry-After needs a forced status whose error carries Retry-After."""
    carrying = [
        s
        for s in api.mock_faults["statuses"]
        if "Retry-After" in api.error_headers(_first_code(api, s))
    ]
    if status not in carrying:
        why = api.mock_faults["idle"]["retry_after"].format(statuses=", ".join(map(str, carrying)))
        raise _idle(api.mock_faults, RETRY_AFTER, why)


def _number(
    faults: dict[str, Any],
    headers: Headers,
    name: str,
    default: float,
    integer: bool = False,
    most: float = math.inf,
    expected: str | None = None,
) -> float:
    raw = headers.get(name)
    if raw is None:
        return default
    # ASCII digits only: int() and float() also take "1_0", "+5", "1e3", "nan" and other
    # scripts' digits; past 4,300 digits int() raises, and float() gives inf (refused below)
    value: float = -1
    if (_WHOLE if integer else _DECIMAL).fullmatch(raw.strip()):
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            pass
    if not math.isfinite(value) or not 0 <= value <= most:
        raise invalid(faults, name, expected or ("count" if integer else "milliseconds"))
    return value


class Fault(NamedTuple):
    """After `after` choice deltas: the error event of `code` (`error`, filled in for the
    request), a stall of `stall_s`, or a dropped connection."""

    after: int
    code: str | None = None
    error: ApiError | None = None
    stall_s: float = 0.0
    drop: bool = False


class Asked(NamedTuple):
    """What one request's headers (and the configured rates) ask of the mock."""

    ttft_s: float
    tpot_s: float
    forced: int | None  # a status answered in place of the completion
    fail_first: int | None  # ... on the first this many requests of one key
    retry_after: int | None  # the forced error's Retry-After, in place of the API's
    stream: tuple[Fault, ...]  # what a stream does after so many choice deltas


class Faults:
    """The mock's hook (api_server/hooks.py): its headers, the configured fault rates and
    latency (live: control.py), the load model (load.py), and vLLM's metrics of it all."""

    def __init__(self, config: MockConfig, api: Spec, metrics: VllmMetrics | None = None) -> None:
        """`metrics`: where vLLM's metrics of the requests go; None: nowhere (--disable-log-stats)."""
        self.api = api
        check_spec(self.api)
        self.settings = Control(config)
        self.rng = random.Random(config.fault_seed)
        self.fault_statuses = fault_statuses(config, self.api.mock_faults)
        self.metrics = metrics
        self.scheduler = Scheduler(self.settings, self.metrics)
        self.known_headers = tuple(sorted(self.api.mock_headers))
        self.known = frozenset(name.lower() for name in self.known_headers)
        self.seen = SeenCounts()  # here, before gunicorn forks: one count for every worker

    def asked(self, headers: Headers, req: CompletionRequest) -> Asked:
        """What this request's headers (and the configured rates) ask of the mock, a forced
        status raised (after validation, before the Budget holds anything, as the real API
        refuses a request) and each stream fault's error filled in: what the engine runs with,
        and what a replayed answer does (cassette.Replayer), so a header means the same in both."""
        config = self.settings()
        mine = mock_headers(self.api.mock_faults, headers, self.known_headers, self.known)
        deltas = req.max_tokens * req.n * len(req.prompts)  # a stream's most choice deltas
        asked = read(self.api, mine, config, self.rng, req.max_tokens, self.fault_statuses, deltas)
        if asked.fail_first is not None:
            key = mine.get(FAIL_KEY) or headers.get("Authorization") or ""
            if self.seen.next(key) > asked.fail_first:  # its faults are spent: a plain request
                asked = read(self.api, MockHeaders(), config, self.rng, req.max_tokens)
        forced = asked.forced
        if (
            forced is not None
        ):  # raised without a local: one would hold its traceback's frame (a cycle)
            raise self._forced(forced, asked.retry_after, req)
        faults = (
            tuple(
                f._replace(error=coded_error(self.api, f.code, req)) if f.code else f
                for f in asked.stream
            )
            if req.stream
            else ()
        )
        return asked._replace(stream=faults)

    def engine(self, headers: Headers, req: CompletionRequest, engine: Engine) -> Engine:
        """The engine for this request, observed in vLLM's metrics (if any): `engine`, or `engine`
        with the load model, the latency and the stream faults asked for (`asked`); a full
        queue is refused when the engine starts."""
        config = self.settings()
        asked = self.asked(headers, req)
        faults = asked.stream
        # from when the server took the request up: a load tool's TTFT counts the stack's queue
        clock = RequestClock(
            config.loaded or bool(asked.ttft_s or asked.tpot_s), received(), config.loaded
        )
        if config.loaded:
            engine = Loaded(engine, self.scheduler, asked.ttft_s, asked.tpot_s, clock)
            if faults:
                engine = Simulated(engine, 0, 0, faults)
        elif asked.ttft_s or asked.tpot_s or faults:
            engine = Simulated(engine, asked.ttft_s, asked.tpot_s, faults)
        return (
            engine
            if self.metrics is None
            else Metered(engine, self.metrics, req.body["model"], clock)
        )

    def _forced(self, status: int, retry_after: int | None, req: CompletionRequest) -> ApiError:
        """The error of a forced status: its first code's, with the Retry-After asked for."""
        error = coded_error(self.api, _first_code(self.api, status), req)
        if retry_after is not None and "Retry-After" in self.api.error_headers(error.code):
            error.headers = {"Retry-After": str(retry_after)}
        return error


class Simulated(Paced):
    """`engine` as one request of the mock runs it: `ttft_s` before its first token and
    `tpot_s` before each later step (latency.py); in a stream, `faults` (an error event, a
    stall, a dropped connection) after so many choice deltas."""

    def __init__(
        self, engine: Engine, ttft_s: float, tpot_s: float, faults: tuple[Fault, ...] = ()
    ) -> None:
        super().__init__(engine)
        self.ttft_s, self.tpot_s, self.faults = ttft_s, tpot_s, faults

    def paced(
        self, req: CompletionRequest, request_id: str, sleep: Callable[[float], object]
    ) -> Iterator[Event]:
        return paced(self.engine.generate(req, request_id), self.ttft_s, self.tpot_s, sleep)

    def batches(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        return paced_batches(
            self.engine.generate(req, request_id), self.ttft_s, self.tpot_s, interval
        )

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        latent = self.ttft_s or self.tpot_s
        batches = (
            super().stream(req, request_id, interval)
            if latent
            else self.engine.stream(req, request_id, interval)
        )
        return _faulted(batches, self.faults) if self.faults else batches


def _faulted(batches: Batches, faults: tuple[Fault, ...]) -> Batches:
    """`batches`, with each fault in place at choice delta `after` (counted from 0): the error
    event, in the same write as the deltas before it, ends the stream (before any delta, the
    error is raised: the API answers it with its status, as any error before content); a stall sends those
    deltas and then nothing (no keepalive: the batches the engine makes meanwhile wait);
    a drop sends them and raises Dropped. A stall or drop before any delta first lets the
    headers go (an empty batch: the route's first), so that it happens in the body."""
    pending = sorted(faults, key=lambda f: (f.after, f.error is not None or f.drop))
    sent, started = 0, False
    try:
        for batch in batches:
            start = 0
            for i, event in enumerate(batch):
                if not isinstance(event, ChoiceDelta):
                    continue
                while pending and pending[0].after == sent:
                    fault = pending.pop(0)
                    if fault.error is not None and not started and not batch[start:i]:
                        raise fault.error  # before any content: the API answers it with its status
                    if fault.error is not None:
                        yield [*batch[start:i], ErrorEvent(fault.error)]
                        return
                    if batch[start:i] or not started:
                        yield batch[start:i]
                    started, start = True, i
                    if fault.drop:
                        raise Dropped()
                    time.sleep(fault.stall_s)
                sent += 1
            if batch[start:] or not started:
                yield batch[start:]
                started = True
        for fault in pending:  # at or past the last delta: after it, before [DONE]
            if fault.error is not None:
                yield [ErrorEvent(fault.error)]
                return
            if fault.drop:
                raise Dropped()
            time.sleep(fault.stall_s)
    finally:
        batches.close()


def fault_statuses(config: MockConfig, faults: dict[str, Any]) -> tuple[int, ...] | None:
    """config.fault_statuses as statuses of x-mock-faults; ConfigError (at start) names the option."""
    if config.fault_statuses is None:
        return None
    try:
        chosen = tuple(int(v) for v in config.fault_statuses.split(",") if v.strip())
    except ValueError:
        chosen = ()
    if not chosen or set(chosen) - set(faults["statuses"]):
        raise ConfigError(
            f"{config.option('fault_statuses')} must be some of {', '.join(map(str, faults['statuses']))}"
            f" (comma-separated), got {config.fault_statuses!r}"
        )
    return chosen


class MockHeaders(dict[str, str]):
    """A request's headers of the mock's prefix, looked up case-insensitively (keys lower-case)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


def mock_headers(
    faults: dict[str, Any], headers: Headers, known: tuple[str, ...], lowered: frozenset[str]
) -> MockHeaders:
    """The headers of the mock's prefix, in one pass over the request's (each lookup of
    werkzeug's would walk the WSGI environ again: ten of them were ~10 us a request); 400
    for one not in `lowered` (`known`, lower-case), the name quoted cut."""
    prefix = faults["header_prefix"].lower()
    mine = MockHeaders()
    for name, value in headers.items():
        low = name.lower()
        if low.startswith(prefix):
            if low not in lowered:
                raise InvalidRequest(
                    Message(
                        text=faults["unknown_header"],
                        fields={"header": name, "known": Message(text=", ".join(known))},
                    )
                )
            mine[low] = value
    return mine


def read(
    api: Spec,
    headers: Headers,
    config: MockConfig,
    rng: random.Random,
    max_tokens: int,
    chosen: tuple[int, ...] | None = None,
    deltas: int | None = None,
) -> Asked:
    """Read the mock's headers (`mock_headers`; 400 for a bad value) and roll the configured
    fault rates."""
    if not headers and not config.fault_rate and not config.stream_error_rate:  # most requests
        return Asked(config.ttft_ms / 1000, config.tpot_ms / 1000, None, None, None, ())
    faults = api.mock_faults
    statuses = faults["statuses"]
    forced = None
    raw = headers.get(STATUS)
    if raw is not None:
        # compared as text: a hostile value is never made a number
        forced = {str(s): s for s in statuses}.get(raw.strip())
        if forced is None:
            raise invalid(faults, STATUS, "status")
    elif config.fault_rate and rng.random() < config.fault_rate:
        forced = rng.choice(chosen or statuses)
    fail_first = (
        None
        if headers.get(FAIL_FIRST) is None
        else int(_number(faults, headers, FAIL_FIRST, 0, integer=True))
    )
    stream = _stream_faults(api, headers, config, rng, max_tokens, deltas)
    if fail_first is not None and forced is None and not _asks_more(headers, stream):
        forced = faults["fail_status"]  # X-Mock-Fail-First alone: its first requests fail
    retry_after = None
    if headers.get(RETRY_AFTER) is not None:
        retry_after = int(
            _number(
                faults,
                headers,
                RETRY_AFTER,
                0,
                integer=True,
                most=faults["max_retry_after"],
                expected="seconds",
            )
        )
        if not config.fault_rate:
            _retry_after_applies(api, forced)
    return Asked(
        _number(faults, headers, TTFT_MS, config.ttft_ms) / 1000,
        _number(faults, headers, TPOT_MS, config.tpot_ms) / 1000,
        forced,
        fail_first,
        retry_after,
        stream,
    )


def _asks_more(headers: Headers, stream: tuple[Fault, ...]) -> bool:
    """Whether X-Mock-Fail-First comes with a fault of another header (which it then scopes)."""
    return bool(stream) or headers.get(TTFT_MS) is not None or headers.get(TPOT_MS) is not None


def _stream_faults(
    api: Spec,
    headers: Headers,
    config: MockConfig,
    rng: random.Random,
    max_tokens: int,
    deltas: int | None = None,
) -> tuple[Fault, ...]:
    """The stream faults asked for; a count past the most choice deltas the stream can have
    (`deltas`) is refused (a fault that never happens), one at or past its last delta happens
    after it, before [DONE]."""
    faults = api.mock_faults
    out = []
    after: int | None = None
    if headers.get(STREAM_ERROR_AFTER) is not None:
        after = int(_number(faults, headers, STREAM_ERROR_AFTER, 0, integer=True))
    elif config.stream_error_rate and rng.random() < config.stream_error_rate:
        after = rng.randrange(max_tokens)
    code = headers.get(STREAM_ERROR_CODE)
    if code is not None and code.strip() not in stream_error_codes(api):
        raise invalid(faults, STREAM_ERROR_CODE, "code", stream_error_codes(api))
    if code is not None and after is None and not config.stream_error_rate:
        raise _idle(faults, STREAM_ERROR_CODE, faults["idle"]["stream_error_code"])
    if after is not None:
        out.append(Fault(after, code=code.strip() if code else faults["stream_error_code"]))
    if headers.get(STALL_AFTER) is not None:
        stall_ms = _number(
            faults,
            headers,
            STALL_MS,
            faults["stall_ms"],
            most=faults["max_stall_ms"],
            expected="stall",
        )
        out.append(
            Fault(
                int(_number(faults, headers, STALL_AFTER, 0, integer=True)), stall_s=stall_ms / 1000
            )
        )
    if headers.get(DROP_AFTER) is not None:
        out.append(Fault(int(_number(faults, headers, DROP_AFTER, 0, integer=True)), drop=True))
    for header, fault in zip(_named(headers, after is not None), out):
        if header is not None and deltas is not None and fault.after > deltas:
            why = faults["idle"]["past_the_end"].format(after=fault.after, deltas=deltas)
            raise _idle(faults, header, why)
    return tuple(out)


def _named(headers: Headers, error: bool) -> list[str | None]:
    """The header of each fault _stream_faults made, in its order (None: a rate's)."""
    named: list[str | None] = []
    if error:
        named.append(STREAM_ERROR_AFTER if headers.get(STREAM_ERROR_AFTER) is not None else None)
    named += [h for h in (STALL_AFTER, DROP_AFTER) if headers.get(h) is not None]
    return named


def coded_error(api: Spec, code: str, req: CompletionRequest) -> ApiError:
    """The error of `code` (a forced status's first code, or a stream error's), its
    message filled as the API would, or the mock's own where the code's would tell of a count it
    has not kept (x-mock-faults.forced_messages)."""
    forced = api.mock_faults.get("forced_messages", {}).get(code)
    if forced is not None:
        return error_class(code)(Message(text=forced, fields={}))
    return error_class(code).from_template(
        code,
        remaining=0,
        prompt_tokens=sum(req.prompt_token_counts),
        sequences=len(req.prompts) * req.n,
        seconds=api.caps["wait_seconds"],
    )


def stream_error_codes(api: Spec) -> tuple[str, ...]:
    """What X-Mock-Stream-Error-Code may name: the codes of x-mock-faults' statuses."""
    return tuple(
        c for c, v in api.error_codes.items() if v["status"] in api.mock_faults["statuses"]
    )
