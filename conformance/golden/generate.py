"""Write the golden cases that follow from openapi.yaml: fields, rules, caps, lens, http (one
module a family: fields.py, rules.py, caps.py, lens.py, http_cases.py; cases.py what they share).

Expected bodies are built here from the spec's templates and numbers, not by
calling the core, so running the cases through the core checks the core. What the
generator asserts of itself is narrower: every case it calls accepted passes the core's
validation, and every rule's refused example is refused for that rule (`_held`), so a spec
whose examples or rules disagree fails where the cases are written, naming the case.
`python -m conformance.golden` rewrites the files; a test checks they are fresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conformance.golden import HERE, expand
from conformance.golden.caps import CapCases
from conformance.golden.cases import generates, satisfy
from conformance.golden.fields import FieldCases
from conformance.golden.http_cases import HttpCases
from conformance.golden.lens import LensCases
from conformance.golden.rules import RuleCases
from contract import ApiError, Contract, SpecError
from contract.spec import Spec, spec

GENERATED_FILES = ("fields.yaml", "rules.yaml", "caps.yaml", "lens.yaml", "http.yaml")


def generate(api: Spec | None = None) -> dict[str, list[dict[str, Any]]]:
    api = api or spec()
    files = {
        "fields.yaml": list(FieldCases(api).fields()),
        "rules.yaml": list(RuleCases(api).rules()),
        "caps.yaml": list(CapCases(api).caps()),
        "lens.yaml": list(LensCases(api).lens()),
        "http.yaml": list(HttpCases(api).http()),
    }
    files = {name: [_met(api, c) for c in cases] for name, cases in files.items()}
    _held(api, [c for cases in files.values() for c in cases])
    return {name: [tagged(case, api) for case in cases] for name, cases in files.items()}


def _met(api: Spec, case: dict[str, Any]) -> dict[str, Any]:
    """An accepted completion case with what the spec's cross-field rules need of its body,
    whichever family wrote it (cases.satisfy), and what it generates then."""
    request, expect = case["request"], case["expect"]
    body = request.get("body")
    if expect["status"] != 200 or request["path"] != api.completions_path:
        return case
    if not isinstance(body, dict):
        return case
    met = satisfy(api, body)
    if met == body:
        return case
    return {
        **case,
        "request": {**request, "body": met},
        "expect": {**expect, "generates": generates(api, met)},
    }


def _held(api: Spec, cases: list[dict[str, Any]]) -> None:
    """Each accepted completion case passes the core's validation, and each rule's refused
    example is refused by that rule (its message, param and code); SpecError names the first
    that does not."""
    contract = Contract(api)
    rules = {f"rule.{r['id']}": r for r in api.rules}
    for c in cases:
        request, expect = c["request"], c["expect"]
        body = request.get("body")
        if request["path"] != api.completions_path or not isinstance(body, dict):
            continue
        rule = rules.get(c["id"]) or rules.get(c["id"].rpartition(".")[0])
        refused = expect["status"] != 200
        if refused and rule is None:
            continue
        try:
            contract.validate_completion(expand(body))
        except ApiError as exc:
            said = contract.errors.body(exc, "golden")["error"]
            if refused and said == expect["body"]["error"]:
                continue
            other = " for another rule" if refused else ""
            raise SpecError(
                f"golden case {c['id']}: the core refuses it{other}: {said['message']}"
            ) from None
        if rule is not None and refused:
            raise SpecError(f"golden case {c['id']}: the core accepts what {rule['id']} refuses")


def features(body: Any, api: Spec) -> list[str]:
    """The feature tags of a body (its fields' x-kind feature, where the field is sent and
    neither null nor false), sorted: what --include and --skip select golden cases by."""
    if not isinstance(body, dict):
        return []
    kinds = api.request_kinds
    return sorted(
        {
            kinds[name]["feature"]
            for name, value in body.items()
            if name in kinds and kinds[name]["feature"] and value not in (None, False)
        }
    )


def tagged(case: dict[str, Any], api: Spec) -> dict[str, Any]:
    """The case with its body's feature tags after its own."""
    more = [t for t in features(case["request"].get("body"), api) if t not in case["tags"]]
    return {**case, "tags": [*case["tags"], *more]} if more else case


def render(cases: list[dict[str, Any]]) -> str:
    """One case, one block a reviewer can scan: its fields one a line, and a request's
    body, headers and tags (and an expected error) each on one line."""
    head = "# Generated from openapi.yaml by `python -m conformance.golden`; do not edit.\n"
    return head + yaml.dump(
        {"cases": [_scannable(c) for c in cases]},
        Dumper=_Dumper,
        sort_keys=False,
        width=1 << 16,
        allow_unicode=True,
    )


class _Flow(dict):
    """A mapping written on one line."""


class _FlowList(list):
    """A list written on one line."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # no &id001 / *id001: every case reads on its own


_Dumper.add_representer(
    _Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True)
)
_Dumper.add_representer(
    _FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)


def _scannable(case: dict[str, Any]) -> dict[str, Any]:
    """The case with its leaves' containers marked for one line each: tags, the request's
    body and headers, and the parts of an expected body (its error object)."""

    def flow(value: Any) -> Any:
        if isinstance(value, dict):
            return _Flow(value)
        return _FlowList(value) if isinstance(value, list) else value

    out = {k: _FlowList(v) if k == "tags" else v for k, v in case.items()}
    out["request"] = {k: flow(v) for k, v in case["request"].items()}
    expect = dict(case["expect"])
    if isinstance(expect.get("body"), dict):
        expect["body"] = {k: flow(v) for k, v in expect["body"].items()}
    out["expect"] = expect
    return out


def write(directory: Path = HERE) -> list[Path]:
    out = []
    for name, cases in generate().items():
        path = directory / name
        path.write_text(render(cases), encoding="utf-8")
        out.append(path)
    return out
