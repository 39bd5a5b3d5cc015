"""Spec coverage: what a run exercised, against openapi.yaml.

Every answer the run got (the suite's own requests and schemathesis's) is
observed: the route and method called, the request fields sent and whether the
server took them (a 2xx) or refused them by name (the error's param), the rule
the error names (recognised from its code, param and message by spec_rules),
the error code, the status, the documented response headers seen and the kinds
of stream events; and the request fields whose effect a check saw (the
`effects` of the checks that passed: `x-effect` `observed` in openapi.yaml).
The universe of each is read from the spec, never listed here; error codes whose x-error-codes
entry says a client cannot provoke them (`conformance: fault`, a server's own failure) are left out of the universe,
and so are those that need a run option (`conformance: exhausted-key`) in a
run without it, with the headers that only those codes carry.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from conformance.spec.rules import all_rule_keys, rule_for
from conformance.wire.client import Reply, StreamReply
from contract import Spec

REQUEST_SCHEMA = "CompletionRequest"
CATEGORIES = (
    "routes",
    "fields_valid",
    "fields_invalid",
    "rules",
    "error_codes",
    "statuses",
    "headers",
    "stream_events",
    "effects",
)
STEERING = (
    "apply_steering_vectors",
    "SteeringVector",
)  # its fields' effects: "apply_steering_vectors.scale"


def _param_root(param: Any) -> str | None:
    return re.split(r"[.\[]", param, maxsplit=1)[0] if isinstance(param, str) else None


def observable_effects(api: Spec) -> list[str]:
    """The request fields whose x-effect says a client observes it (SteeringVector's fields
    as apply_steering_vectors.<field>)."""
    field, vector = STEERING
    fields = {
        **api.schema(REQUEST_SCHEMA)["properties"],
        **{f"{field}.{k}": v for k, v in api.schema(vector)["properties"].items()},
    }
    return sorted(k for k, v in fields.items() if "observed" in v.get("x-effect", {}))


def universe(api: Spec, *, exhausted_key: bool = False) -> dict[str, list[str]]:
    """What a run could cover, each category read from `api`."""
    codes = [
        code
        for code, entry in api.error_codes.items()
        if entry.get("conformance") is None
        or (entry["conformance"] == "exhausted-key" and exhausted_key)
    ]
    statuses = {
        str(c)
        for r in api.routes
        for c in api.operation(r.operation_id)["responses"]
        if str(c).startswith("2")
    }
    statuses |= {str(api.error_codes[c]["status"]) for c in codes}
    fields = sorted(api.schema(REQUEST_SCHEMA)["properties"])
    # A header that only error codes outside the universe carry (x-error-codes `headers`:
    # Retry-After on a fault, x-should-retry without an exhausted key) cannot be seen either.
    carried = {h for entry in api.error_codes.values() for h in entry.get("headers", [])}
    reachable = {h for c in codes for h in api.error_codes[c].get("headers", [])}
    headers = [h for h in api.response_headers if h not in carried or h in reachable]
    return {
        "routes": sorted(f"{r.method} {r.path}" for r in api.routes),
        "fields_valid": fields,
        "fields_invalid": fields,
        "rules": all_rule_keys(api),
        "error_codes": sorted(codes),
        "statuses": sorted(statuses),
        "headers": sorted(headers),
        "stream_events": sorted(api.event_schemas),
        "effects": observable_effects(api),
    }


class Coverage:
    """Collects what the run's answers exercised; thread-safe (checks may run threads)."""

    def __init__(self, api: Spec, *, exhausted_key: bool = False) -> None:
        self.api = api
        self.universe = universe(api, exhausted_key=exhausted_key)
        self.seen: dict[str, set[str]] = {c: set() for c in CATEGORIES}
        self._lock = threading.Lock()
        self._header_names = {h.lower(): h for h in self.universe["headers"]}

    def observe_reply(self, method: str, path: str, body: bytes | None, reply: Reply) -> None:
        """A client observer (conformance.wire.client.Client.observers)."""
        kinds = [e.kind for e in reply.parsed.events] if isinstance(reply, StreamReply) else None
        self.observe(method, path, body, reply.status, reply.headers, reply.data, kinds)

    def observe(
        self,
        method: str,
        path: str,
        body: bytes | str | None,
        status: int | None,
        headers: Any,
        data: Any = None,
        event_kinds: list[str] | None = None,
    ) -> None:
        """One request and the answer it got (status None: no answer)."""
        if status is None:
            return
        path = path.split("?", 1)[0]
        error = (
            data.get("error")
            if isinstance(data, dict) and isinstance(data.get("error"), dict)
            else None
        )
        with self._lock:
            seen = self.seen
            seen["routes"].add(f"{method.upper()} {path}")
            seen["statuses"].add(str(status))
            seen["headers"].update(
                self._header_names[k.lower()] for k in headers if k.lower() in self._header_names
            )
            seen["stream_events"].update(event_kinds or ())
            if error is not None:
                if isinstance(error.get("code"), str):
                    seen["error_codes"].add(error["code"])
                rule = rule_for(data, self.api)
                if rule:
                    seen["rules"].add(rule)
            if method.upper() == "POST" and path == self.api.completions_path:
                self._fields(body, status, error)

    def observe_effects(self, fields: Any) -> None:
        """Fields whose effect a check saw (the `effects` of the checks that passed)."""
        with self._lock:
            self.seen["effects"].update(fields)

    def _fields(self, body: bytes | str | None, status: int, error: dict[str, Any] | None) -> None:
        try:
            sent = json.loads(body) if body else None
        except (ValueError, RecursionError):  # a hostile body the gate sent (robust:json.*)
            return
        if not isinstance(sent, dict):
            return
        if 200 <= status < 300:
            self.seen["fields_valid"].update(k for k, v in sent.items() if v is not None)
        elif error is not None:
            root = _param_root(error.get("param"))
            if root is not None and root in sent:
                self.seen["fields_invalid"].add(root)

    def summary(self) -> dict[str, Any]:
        """category -> covered, total, percent, and what was not covered."""
        out = {}
        for cat in CATEGORIES:
            total = self.universe[cat]
            covered = [x for x in total if x in self.seen[cat]]
            out[cat] = {
                "covered": len(covered),
                "total": len(total),
                "percent": round(100 * len(covered) / len(total), 1) if total else 100.0,
                "not_covered": [x for x in total if x not in self.seen[cat]],
            }
        return out


def summary_line(summary: dict[str, Any]) -> str:
    """One line: each category's percentage."""
    return "spec coverage: " + ", ".join(
        f"{cat.replace('_', ' ')} {s['percent']:g}% ({s['covered']}/{s['total']})"
        for cat, s in summary.items()
    )
