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
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from api_server.engine import Batches, ChoiceDelta, Engine, ErrorEvent, Event
from api_server.hooks import Headers
from api_server.pacing import Pump
from api_server.config import ConfigError
from contract import ApiError, CompletionRequest, InvalidRequest, Spec, spec
from contract.errors import Message, error_class
from mock_server.config import MockConfig
from mock_server.control import Control
from mock_server.latency import paced, paced_batches
from mock_server.load import Loaded, Scheduler
from mock_server.metered import Metered

if TYPE_CHECKING:   # (imported by create_app: api_server/metrics.py says why)
    from mock_server.metrics import VllmMetrics

STATUS = "X-Mock-Status"
STREAM_ERROR_AFTER = "X-Mock-Stream-Error-After"
TTFT_MS = "X-Mock-Ttft-Ms"
TPOT_MS = "X-Mock-Tpot-Ms"


def check_spec(s: Spec) -> None:
    """Fail at start if the spec no longer documents a header this module reads."""
    documented = s.mock_headers
    missing = [h for h in (STATUS, STREAM_ERROR_AFTER, TTFT_MS, TPOT_MS) if h not in documented]
    if missing or not s.mock_faults:
        raise RuntimeError(f"openapi.yaml lacks the mock's headers {missing} or x-mock-faults")


def _invalid(faults: dict[str, Any], header: str, expected: str) -> InvalidRequest:
    text = faults["expected"][expected].format(statuses=", ".join(map(str, faults["statuses"])))
    return InvalidRequest(faults["invalid_header"].format(header=header, expected=text))


def _number(faults: dict[str, Any], headers: Headers, name: str, default: float,
            integer: bool = False) -> float:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0:
        raise _invalid(faults, name, "count" if integer else "milliseconds")
    return value


class Faults:
    """The mock's hook (api_server/hooks.py): its headers, the configured fault rates and
    latency (live: control.py), the load model (load.py), and vLLM's metrics of it all."""

    def __init__(self, config: MockConfig, s: Spec | None = None, metrics: VllmMetrics | None = None) -> None:
        """`metrics`: where vLLM's metrics of the requests go; None: nowhere (--disable-log-stats)."""
        self.spec = s if s is not None else spec()
        check_spec(self.spec)
        self.settings = Control(config)
        self.rng = random.Random(config.fault_seed)
        self.fault_statuses = fault_statuses(config, self.spec.mock_faults)
        self.metrics = metrics
        self.scheduler = Scheduler(self.settings, self.metrics)
        self.known_headers = tuple(sorted(self.spec.mock_headers))

    def engine(self, headers: Headers, req: CompletionRequest, engine: Engine) -> Engine:
        """The engine for this request, observed in vLLM's metrics (if any): `engine`, or `engine`
        with the load model, the latency and the stream error asked for. A forced status
        is raised here: after validation, before the Budget holds anything, as the real
        API refuses a request; a full queue is refused when the engine starts."""
        config = self.settings()
        ttft_s, tpot_s, forced, after = read(self.spec.mock_faults, headers, config, self.rng, req.max_tokens,
                                             self.known_headers, self.fault_statuses)
        if forced is not None:
            raise forced_error(self.spec, forced, req)
        failure = None if after is None else (after, stream_error(self.spec))   # built only when asked for
        if config.loaded:
            engine = Loaded(engine, self.scheduler, ttft_s, tpot_s)
            if failure is not None:
                engine = Simulated(engine, 0, 0, failure)
        elif ttft_s or tpot_s or failure is not None:
            engine = Simulated(engine, ttft_s, tpot_s, failure)
        return engine if self.metrics is None else Metered(engine, self.metrics, req.body["model"])


class Simulated(Engine):
    """`engine` as one request of the mock runs it: `ttft_s` before its first token and
    `tpot_s` before each later step (latency.py); in a stream, the error event of
    x-mock-faults after so many choice deltas (`failure`: the count and the error; none
    without stream)."""

    def __init__(self, engine: Engine, ttft_s: float, tpot_s: float,
                 failure: tuple[int, ApiError] | None = None) -> None:
        self.engine, self.ttft_s, self.tpot_s, self.failure = engine, ttft_s, tpot_s, failure

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        return paced(self.engine.generate(req, request_id), self.ttft_s, self.tpot_s, time.sleep)

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        batches: Batches
        if not self.ttft_s and not self.tpot_s:
            batches = self.engine.stream(req, request_id, interval)
        elif self.engine.never_waits:   # the waits in the request's own thread
            batches = paced_batches(self.engine.generate(req, request_id), self.ttft_s, self.tpot_s,
                                    interval)
        else:   # the waits in the pump's thread, whose sleep cancelling wakes
            batches = Pump(lambda sleep: paced(self.engine.generate(req, request_id), self.ttft_s,
                                               self.tpot_s, sleep), interval).batches()
        return batches if self.failure is None else _failing(batches, *self.failure)


def _failing(batches: Batches, after: int, error: ApiError) -> Batches:
    """`batches`, ending with the stream error event (`error`) in place of choice delta `after`
    (counted from 0): an event even before the first delta, and in the same write as the
    deltas that precede it."""
    sent = 0
    try:
        for batch in batches:
            for i, event in enumerate(batch):
                if isinstance(event, ChoiceDelta):
                    if sent == after:
                        yield [*batch[:i], ErrorEvent(error)]
                        return
                    sent += 1
            yield batch
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
        raise ConfigError(f"{config.option('fault_statuses')} must be some of {', '.join(map(str, faults['statuses']))}"
                          f" (comma-separated), got {config.fault_statuses!r}")
    return chosen


def _unknown_header(faults: dict[str, Any], headers: Headers, known: tuple[str, ...]) -> None:
    """400 for a header with the mock's prefix that it does not read (the name quoted cut)."""
    prefix = faults["header_prefix"].lower()
    for name in headers.keys():
        if name.lower().startswith(prefix) and name.lower() not in {k.lower() for k in known}:
            raise InvalidRequest(Message(text=faults["unknown_header"], fields={
                "header": name, "known": Message(text=", ".join(known))}))


def read(faults: dict[str, Any], headers: Headers, config: MockConfig, rng: random.Random,
         max_tokens: int, known: tuple[str, ...] = (),
         chosen: tuple[int, ...] | None = None) -> tuple[float, float, int | None, int | None]:
    """Read the mock's headers (400 for a bad value, or for one of `known`'s prefix it does not
    read) and roll the configured fault rates: (ttft_s, tpot_s, forced status, choice deltas
    before a stream error)."""
    if known:
        _unknown_header(faults, headers, known)
    # One lookup a header (each costs about half a microsecond, on every request).
    statuses = faults["statuses"]
    forced = None
    raw = headers.get(STATUS)
    if raw is not None:
        raw = raw.strip()
        if not raw.isdigit() or int(raw) not in statuses:
            raise _invalid(faults, STATUS, "status")
        forced = int(raw)
    elif config.fault_rate and rng.random() < config.fault_rate:
        forced = rng.choice(chosen or statuses)
    after: int | None = None
    if headers.get(STREAM_ERROR_AFTER) is not None:
        after = int(_number(faults, headers, STREAM_ERROR_AFTER, 0, integer=True))
    elif config.stream_error_rate and rng.random() < config.stream_error_rate:
        after = rng.randrange(max_tokens)
    return (_number(faults, headers, TTFT_MS, config.ttft_ms) / 1000,
            _number(faults, headers, TPOT_MS, config.tpot_ms) / 1000, forced, after)


def forced_error(s: Spec, status: int, req: CompletionRequest) -> ApiError:
    """The error the API would send with this status (`s`'s first code with it), its
    message filled as the API would."""
    code = next(c for c, v in s.error_codes.items() if v["status"] == status)
    return error_class(code).from_template(
        code, remaining=0, prompt_tokens=sum(req.prompt_token_counts),
        sequences=len(req.prompts) * req.n, seconds=s.caps["wait_seconds"])


def stream_error(s: Spec) -> ApiError:
    code = s.mock_faults["stream_error_code"]
    return error_class(code).from_template(code)
