"""Answers a check cannot read: the server's finding where the answer is off the API's shape, the
suite's own error only where it is not; and a JSON integer the gate can do arithmetic with.

A server whose choices were not objects, or whose fields had other types, ended 15 checks in the
suite's own error (AttributeError), and a usage of 4,300 digits crashed the whole run (a sum past
Python's int-to-str limit in a reason)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.context import Context
from conformance.engine.registry import Check, select
from conformance.engine.results import Outcome
from conformance.engine.runner import connect, run, run_check
from conformance.engine.shapes import schema_errors
from conformance.wire import jsontext
from contract import spec
from gallery.answers import Rewrites
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.mock import KEY

MODEL = spec().default_model
READ = "an answer is not the API's shape, and the check could not read it"


def _choices_not_objects(data: dict[str, Any]) -> None:
    data["choices"] = [1, "x", None]


def _fields_of_other_types(data: dict[str, Any]) -> None:
    for choice in data["choices"]:
        choice.update(logprobs=5, text=3, index="a", token_ids="zz", prompt_logprobs=9)


def _run(change: Callable[[dict[str, Any]], None], select_: tuple[str, ...]) -> dict[str, Any]:
    config = RunConfig(
        base_url="http://off-shape.test", api_key=KEY, model=MODEL, profile="full", select=select_
    ).validate()
    report = run(
        config, select(REGISTRY, config), transport=httpx.WSGITransport(app=Rewrites(change))
    )
    return {r.id: r for r in report.results}


def test_choices_that_are_not_objects_are_a_finding_of_each_check_never_the_suites_error() -> None:
    results = _run(_choices_not_objects, ("logprobs:*", "shape:*", "model:*", "determinism:*"))
    assert not [i for i, r in results.items() if r.outcome is Outcome.ERROR]
    unread = [r for r in results.values() if any(f.message.startswith(READ) for f in r.findings)]
    assert len(unread) >= 10, {i: [f.message for f in r.findings] for i, r in results.items()}
    for r in unread:
        assert r.outcome is Outcome.FAILED
        finding = next(f for f in r.findings if f.message.startswith(READ))
        assert finding.received == schema_errors(
            {**_an_answer(), "choices": [1, "x", None]}, spec().schema("Completion")
        )


def test_fields_of_other_types_are_a_finding_never_the_suites_error() -> None:
    results = _run(_fields_of_other_types, ("logprobs:*", "shape:*", "model:*", "determinism:*"))
    assert not [i for i, r in results.items() if r.outcome is Outcome.ERROR]
    unread = [f for r in results.values() for f in r.findings if f.message.startswith(READ)]
    assert unread and all(
        f.received and all(e.startswith("choices/0/") for e in f.received) for f in unread
    ), [(f.message, f.received) for f in unread]


def _an_answer() -> dict[str, Any]:
    """A whole completion of the mock's, of the API's shape."""
    app = create_app(MockConfig()).test_client()
    body = {"model": MODEL, "prompt": "a", "max_tokens": 1}
    answer = app.post(
        spec().completions_path, json=body, headers={"Authorization": f"Bearer {KEY}"}
    )
    data: dict[str, Any] = answer.get_json()
    assert schema_errors(data, spec().schema("Completion")) == []
    return data


def _reads_a_missing_field(ctx: Context) -> None:
    reply = ctx.client.post(
        ctx.api.completions_path, {"model": MODEL, "prompt": "a", "max_tokens": 1}
    )
    reply.data["no such field"]  # a bug of the check's own


def test_a_check_that_fails_on_an_answer_of_the_apis_shape_is_the_suites_error() -> None:
    """The other side: where every answer is the API's, a crash is the suite's (ERROR), blamed
    on no server; on an answer off the shape the same crash is the server's finding."""
    check = Check("test:reads_a_missing_field", _reads_a_missing_field)
    config = RunConfig(base_url="http://x.test", api_key=KEY, model=MODEL).validate()
    for change, outcome in [(None, Outcome.ERROR), (_choices_not_objects, Outcome.FAILED)]:
        ctx = connect(config, transport=httpx.WSGITransport(app=Rewrites(change)))
        try:
            result = run_check(check, ctx)
        finally:
            ctx.client.close()
        assert result.outcome is outcome, (change, result.reason, result.findings)
    assert result.findings[0].message == f"{READ} (KeyError: 'no such field')"


def test_json_integers_are_read_up_to_half_the_digits_python_prints() -> None:
    half = sys.get_int_max_str_digits() // 2
    at, past = "9" * half, "9" * (half + 1)
    assert jsontext.loads(f'{{"n": {at}, "m": -{at}}}') == {"n": int(at), "m": -int(at)}
    assert str(2 * int(at)) and str(int(at) ** 2)  # a sum or a product of two still prints
    with pytest.raises(ValueError, match=f"^an integer of {half + 1} digits$"):
        jsontext.loads(f'{{"n": {past}}}')
    with pytest.raises(ValueError):
        jsontext.loads(f"[-{past}]")


def test_a_usage_of_4300_digits_is_an_unreadable_answer_not_a_crash() -> None:
    """Each answer's usage claims 4,300-digit counts (the most Python's decoder takes): the run
    ends with its verdict and no check in the suite's own error."""
    big = int("9" * sys.get_int_max_str_digits())

    def claims(data: dict[str, Any]) -> None:
        data["usage"] = {"prompt_tokens": big, "completion_tokens": big, "total_tokens": big}

    results = _run(claims, ("usage:*", "logprobs:*", "semantics:*"))
    assert not [i for i, r in results.items() if r.outcome is Outcome.ERROR]
    assert results["usage:arithmetic"].outcome is Outcome.FAILED
