"""Golden cases: data files with readable ids (format in README.md beside this file)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.spec.bodies import REQUEST_ID_MASK

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    id: str
    doc: str
    tags: tuple[str, ...]
    method: str
    path: str
    auth: str  # "default", "none", or a literal Authorization value
    headers: dict[str, str]
    body: bytes | None  # exactly what is sent
    expect_status: int
    expect_body: dict[str, Any] | None
    generates: int = 0  # tokens a server generates for a 200 case
    source: str = field(default="", compare=False)

    @property
    def content_length(self) -> int | None:
        return None if self.body is None else len(self.body)


def expand(node: Any) -> Any:
    """Expand body macros: {$token_ids: {count, id}} -> [id] * count."""
    if isinstance(node, dict):
        if set(node) == {"$token_ids"}:
            spec = node["$token_ids"]
            return [spec["id"]] * spec["count"]
        return {k: expand(v) for k, v in node.items()}
    if isinstance(node, list):
        return [expand(v) for v in node]
    return node


def padded_body(body: dict[str, Any], size: int) -> bytes:
    """`body` with a `user` string grown so the JSON is exactly `size` bytes."""
    base = json.dumps({**body, "user": ""}, separators=(",", ":")).encode()
    return json.dumps({**body, "user": "a" * (size - len(base))}, separators=(",", ":")).encode()


def _body_bytes(request: dict[str, Any]) -> bytes | None:
    if "raw_body" in request:
        return request["raw_body"].encode()
    if "body_bytes" in request:
        return padded_body(request.get("body", {}), request["body_bytes"])
    if "body" in request:
        return json.dumps(expand(request["body"])).encode()
    return None


def _case(raw: dict[str, Any], source: str) -> Case:
    req, expect = raw["request"], raw["expect"]
    body = _body_bytes(req)
    headers = dict(req.get("headers", {}))
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    return Case(
        id=raw["id"],
        doc=raw.get("doc", ""),
        tags=tuple(raw.get("tags", ())),
        method=req["method"],
        path=req["path"],
        auth=req.get("auth", "default"),
        headers=headers,
        body=body,
        expect_status=expect["status"],
        expect_body=expect.get("body"),
        generates=expect.get("generates", 0),
        source=source,
    )


def load_cases(directory: Path | None = None) -> list[Case]:
    """Every case of every YAML file, in file then list order; ids must be unique."""
    cases: list[Case] = []
    paths = sorted((directory or HERE).glob("*.yaml"))
    if not paths:  # an install that lost them: an error, never a run with no golden case
        raise FileNotFoundError(f"no golden cases (*.yaml) in {directory or HERE}")
    for path in paths:
        for raw in yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]:
            cases.append(_case(raw, path.name))
    ids = [c.id for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate golden case ids: {sorted(dupes)}")
    return cases


def mask(body: Any) -> Any:
    """A response body with its volatile request id masked."""
    if isinstance(body, dict) and "request_id" in body:
        return {**body, "request_id": REQUEST_ID_MASK}
    return body
