"""`python -m conformance diff`: the same checks against two deployments, and every
request whose answer differs.

Both runs go through the ordinary runner; an observer records each answer under
its request (check id, method, path, the request's headers with the key masked,
its body, and how many times that same request came before in the check), so
the two runs pair request by request. An answer is compared as a summary:
status, error code, param and message (request ids and timestamps masked), the
set of response header names (transport headers left out), and the body's
shape (keys, types, array lengths; never sampled text). Exit codes: 0 nothing
differs, 1 something does, 2 usage, configuration or an unreachable server.

The command is conformance.cli.main's (`diff_main`); the reports are conformance.reports.differences's
and the console table conformance.reports.console's.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import httpx

from conformance.engine.config import RunConfig
from conformance.engine.events import Event, ExchangeSeen
from conformance.engine.results import ExitCode
from conformance.engine.runner import run
from conformance.wire.client import Reply, StreamReply
from conformance.wire.exchange import bounded
from conformance.wire.volatile import masked
from contract import Spec

SUMMARY_FIELDS = ("status", "code", "param", "message", "headers", "shape")
# Headers of the transport, not of the API: servers differ in them legitimately.
TRANSPORT_HEADERS = frozenset(
    {"date", "server", "connection", "keep-alive", "transfer-encoding", "content-length", "vary"}
)
VOLATILE_REQUEST_HEADERS = frozenset({"content-length", "user-agent"})
EVENT_KINDS_SHOWN = 40


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "null" if value is None else "string"


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type", [])
    return t if isinstance(t, list) else [t]


def _branch(schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """The part of the response schema that describes `value` (an anyOf's object or array branch)."""
    kind = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else None
    for branch in schema.get("anyOf", []):
        if kind in _types(branch):
            return branch
    return schema


def shape(value: Any, schema: dict[str, Any] | None = None) -> Any:
    """Keys, types and array lengths of a JSON value; never sampled text.

    With the response schema: a map (additionalProperties, no properties, like
    top_logprobs, whose keys are sampled tokens) is whether it is empty and its
    value shapes (not its size: top_logprobs holds N entries, or N + 1 when the
    sampled token is not among the N likeliest, as vLLM writes it),
    and a scalar whose field allows several types (stop_reason: a sampled stop
    or null) is shown as all of them.
    """
    schema = _branch(schema or {}, value)
    if isinstance(value, dict):
        if "properties" not in schema and isinstance(schema.get("additionalProperties"), dict):
            values = sorted(
                {json.dumps(shape(v, schema["additionalProperties"])) for v in value.values()}
            )
            return {
                "map": "entries" if value else "empty",
                "values": [json.loads(v) for v in values],
            }
        props = schema.get("properties", {})
        return {k: shape(v, props.get(k)) for k, v in sorted(value.items())}
    if isinstance(value, list):
        items = sorted({json.dumps(shape(v, schema.get("items")), sort_keys=True) for v in value})
        return {"array": len(value), "items": [json.loads(i) for i in items]}
    kind, declared = _json_type(value), _types(schema)
    if len(declared) > 1 and (kind in declared or (kind == "integer" and "number" in declared)):
        return "/".join(sorted(declared))
    return kind


@cache
def _response_schema(api: Spec, method: str, path: str, status: int) -> dict[str, Any] | None:
    route = next((r for r in api.routes if r.path == path and r.method == method.upper()), None)
    op = api.operation(route.operation_id) if route else None
    response = (op or {}).get("responses", {}).get(str(status))
    if response is None:
        return None
    schema = api.resolve(response).get("content", {}).get("application/json", {}).get("schema")
    return schema if isinstance(schema, dict) else None


def _runs(kinds: list[str]) -> list[str]:
    """Event kinds in order, each run once: ["content", "usage", "done"]. How many
    content chunks arrive is sampled (an end-of-text token ends a stream early)."""
    out: list[str] = []
    for kind in kinds:
        if not out or out[-1] != kind:
            out.append(kind)
    return out[:EVENT_KINDS_SHOWN]


def summarise(api: Spec, method: str, path: str, reply: Reply) -> dict[str, Any]:
    """What of an answer is compared; shapes are read with `api`'s response and event schemas."""
    error = reply.data.get("error") if isinstance(reply.data, dict) else None
    error = error if isinstance(error, dict) else {}
    if isinstance(reply, StreamReply) and reply.parsed.events:
        body_shape: Any = {
            "events": _runs([e.kind for e in reply.parsed.events]),
            "payloads": sorted(
                {
                    json.dumps(
                        {e.kind: shape(e.payload, api.event_schemas.get(e.kind))}, sort_keys=True
                    )
                    for e in reply.parsed.events
                }
            ),
        }
    elif reply.is_json:
        body_shape = shape(reply.data, _response_schema(api, method, path, reply.status or 0))
    else:
        body_shape = {"bytes": "empty" if not reply.content else "not JSON"}
    # each part bounded as the run reports bound a body (a 17.5 MB message is quoted, cut)
    return {
        "status": reply.status
        if reply.error is None
        else f"no answer ({reply.error.split(':')[0]})",
        "code": bounded(error.get("code")),
        "param": bounded(error.get("param")),
        "message": bounded(masked(api, error.get("message"))),
        "headers": bounded(
            sorted(k.lower() for k in reply.headers if k.lower() not in TRANSPORT_HEADERS)
        ),
        "shape": bounded(body_shape),
    }


@dataclass
class Recorder:
    """The answers of one run, by request."""

    api: Spec
    answers: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    requests: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    _seen: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: Event) -> None:
        """A handler of the run's events: each answer, as ExchangeSeen tells it."""
        if isinstance(event, ExchangeSeen):
            self.record(event.check_id, event.method, event.path, event.content, event.reply)

    def record(self, check: str, method: str, path: str, body: bytes | None, reply: Reply) -> None:
        headers = sorted(
            (k.lower(), v)
            for k, v in reply.exchange.request_headers.items()
            if k.lower() not in VOLATILE_REQUEST_HEADERS
            and not k.lower().startswith("x-schemathesis")
        )  # its per-case id
        raw = body.encode() if isinstance(body, str) else body or b""
        base = (check, method.upper(), path, json.dumps(headers), hashlib.sha256(raw).hexdigest())
        summary = summarise(self.api, method, path, reply)
        with self._lock:  # a check may send from several threads
            key = (*base, self._seen[base])
            self._seen[base] += 1
            self.answers[key] = summary
            self.requests[key] = {
                "check": check,
                "method": method.upper(),
                "path": path,
                "headers": dict(headers),
                "body": raw[:2000].decode("utf-8", "replace"),
            }


@dataclass
class DiffReport:
    a_url: str
    b_url: str
    paired: int = 0
    differing: list[dict[str, Any]] = field(default_factory=list)
    only_a: list[dict[str, Any]] = field(default_factory=list)
    only_b: list[dict[str, Any]] = field(default_factory=list)
    secrets: tuple[str, ...] = field(default=(), repr=False)  # both runs' keys (reports.scrub)
    options: dict[str, Any] = field(default_factory=dict)  # RunConfig.options of the two runs

    @property
    def exit_code(self) -> ExitCode:
        return (
            ExitCode.FAILED if self.differing or self.only_a or self.only_b else ExitCode.CONFORMANT
        )

    def by_status(self) -> Counter[str]:
        """How many differing answers of each status pair, "500->400"."""
        return Counter(f"{d['a']['status']}->{d['b']['status']}" for d in self.differing)

    def by_field(self) -> Counter[str]:
        """How many differing answers differ in each summary field."""
        return Counter(f for d in self.differing for f in d["fields"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a_url,
            "b": self.b_url,
            "paired_requests": self.paired,
            "by_status": dict(self.by_status().most_common()),
            "by_field": dict(self.by_field().most_common()),
            "differing": self.differing,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "exit_code": int(self.exit_code),
            "options": self.options,
        }


def compare(a: Recorder, b: Recorder, a_url: str, b_url: str) -> DiffReport:
    report = DiffReport(a_url, b_url)
    for key, answer in a.answers.items():
        if key not in b.answers:
            report.only_a.append({"request": a.requests[key], "answer": answer})
            continue
        report.paired += 1
        other = b.answers[key]
        fields = [f for f in SUMMARY_FIELDS if answer[f] != other[f]]
        if fields:
            report.differing.append(
                {"request": a.requests[key], "fields": fields, "a": answer, "b": other}
            )
    report.only_b = [
        {"request": b.requests[k], "answer": v} for k, v in b.answers.items() if k not in a.answers
    ]
    return report


def run_diff(
    a: RunConfig,
    b: RunConfig,
    checks: Sequence[Any],
    *,
    transports: tuple[httpx.BaseTransport | None, httpx.BaseTransport | None] = (None, None),
) -> DiffReport:
    """The same checks against both deployments, one after the other."""
    recorders = Recorder(a.api), Recorder(b.api)
    for config, recorder, transport in zip((a, b), recorders, transports):
        run(config, checks, transport=transport, handlers=[recorder])
    report = compare(*recorders, a.base_url, b.base_url)
    report.options = a.options()
    report.secrets = a.secrets + b.secrets
    return report


def where_differs(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any]:
    """The first place two shapes differ: (path, the part of a, the part of b)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                return where_differs(
                    a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}"
                )
    return path.lstrip(".") or "(whole)", a, b
