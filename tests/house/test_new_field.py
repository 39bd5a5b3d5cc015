"""A request field added to a copy of openapi.yaml alone (issues 54, 67): one that multiplies the
generated sequences, one that is a list of token ids, each declared by its x-kind, and one
with a cross-field rule (it needs logprobs) that changes the answer's shape (each logprobs
object gains a row). What reads kinds takes them with no code: the core validates them, the
gate prices them, the reference forwards them, the golden cases cover and tag them. The rule
carries its examples in openapi.yaml: the core refuses and accepts by it, the golden cases are
its examples, and every accepted case of every family meets it (the generator fills what it
needs, and asserts the core accepts each). The new row is held by the gate's shape checks as
the spec says it. What a field does is behaviour, not kind: the mock's effect and the check
that observes it are the one place left, and the coverage of effects names exactly them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance.checks import REGISTRY
from conformance.engine.coverage import observable_effects
from conformance.engine.shapes import schema_errors
from conformance.golden.generate import generate
from conformance.wire.token_cost import CostModel
from contract import ApiError, Contract, Spec, SpecError, load_spec
from reference_impl.upstream import upstream_body

BEAMS, BANNED = "beams", "banned_token_ids"
# vLLM's: the token ids whose log probabilities each row shows, beside the likeliest
LISTED, RULE, ROW = "logprob_token_ids", "listed_needs_logprobs", "listed_logprobs"


def token_id_list(observed: str, most: int) -> dict[str, Any]:
    """A vLLM field that is a list of token ids (x-kind token_ids), its effect as observed."""
    return {
        "x-effect": {"observed": observed},
        "x-kind": {"token_ids": True},
        "type": ["array", "null"],
        "minItems": 1,
        "maxItems": most,
        "items": {"type": "integer", "minimum": 0},
        "x-origin": "vllm",
        "x-expected": "an array of token ids",
    }


def with_new_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """openapi.yaml with `beams` (x-kind tokens: sequences) and `banned_token_ids` (x-kind
    token_ids), each saying its effect as every field does."""
    raw = copy.deepcopy(raw)
    request = raw["components"]["schemas"]["CompletionRequest"]
    most = raw["x-caps"]["token_list_items"]
    request["properties"][BEAMS] = {
        "x-effect": {"observed": "each beam is a sequence (effects:beams)"},
        "x-kind": {"tokens": "sequences"},
        "type": ["integer", "null"],
        "minimum": 1,
        "maximum": 4,
        "x-origin": "vllm",
        "x-expected": "an integer",
    }
    request["properties"][BANNED] = token_id_list(
        "no banned token is sampled (effects:banned)", most
    )
    request["properties"][LISTED] = token_id_list(
        "each row shows the listed ids (effects:logprob_token_ids)", most
    )
    last_rule = max(i for i, e in enumerate(request["allOf"]) if "x-rule" in e)
    request["allOf"].insert(
        last_rule + 1,
        {
            "x-rule": RULE,
            "if": {"required": [LISTED], "properties": {LISTED: {"type": "array"}}},
            "then": {
                "required": ["logprobs"],
                "properties": {"logprobs": {"not": {"type": "null"}}},
            },
        },
    )
    raw["x-rules"].append(
        {
            "id": RULE,
            "param": LISTED,
            "code": "invalid_request",
            "message": f"{LISTED} needs logprobs.",
            "examples": {
                "refused": {"alone": {"max_tokens": 1, LISTED: [5]}},
                "accepted": {
                    f"{LISTED}.with_logprobs": {"max_tokens": 1, LISTED: [5], "logprobs": 0}
                },
            },
        }
    )
    raw["components"]["schemas"]["Logprobs"]["properties"][ROW] = {
        "type": "array",
        "items": {"type": "object", "additionalProperties": {"type": "number", "maximum": 0}},
    }
    rule = next(r for r in raw["x-model-rules"] if r["id"] == "token_id_in_vocab")
    rule["params"] += [BANNED, LISTED]
    for entry in request["allOf"]:
        if "x-model" in entry:
            vocab = raw["x-models"][entry["x-model"]]["vocab_size"]
            for field in (BANNED, LISTED):
                entry["then"]["properties"][field] = {"items": {"exclusiveMaximum": vocab}}
    return raw


def load(raw: dict[str, Any], folder: Path) -> Spec:
    path = folder / "openapi.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return load_spec(path)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Spec:
    return load(with_new_fields(load_spec().raw), tmp_path_factory.mktemp("new-field"))


def test_the_core_validates_the_new_fields_by_their_kind(api: Spec) -> None:
    contract, model = Contract(api), api.models[api.default_model]
    body = {"model": model.name, "prompt": "The sky is", "max_tokens": 2}
    accepted = contract.validate_completion({**body, BEAMS: 3, BANNED: [model.vocab_size - 1]})
    assert (accepted.body[BEAMS], accepted.body[BANNED]) == (3, [model.vocab_size - 1])
    with pytest.raises(ApiError) as refused:
        contract.validate_completion({**body, BANNED: [5, model.vocab_size]})
    assert contract.errors.body(refused.value, "r")["error"] == {
        "message": api.rule("x-model-rules", "token_id_in_vocab")["message"].format(
            token_id=model.vocab_size, param=BANNED, vocab_size=model.vocab_size
        ),
        "type": "invalid_request_error",
        "param": BANNED,
        "code": "invalid_request",
    }


def test_the_gate_prices_a_field_that_multiplies_sequences(api: Spec) -> None:
    body = {"prompt": [0], "max_tokens": 5, BEAMS: 3}
    assert CostModel.of(api, 100).body(body) == 3 * 5
    assert CostModel.of(load_spec(), 100).body(body) == 5  # the spec without it: unknown


def test_the_reference_forwards_the_new_fields_to_vllm(api: Spec) -> None:
    contract, model = Contract(api), api.models[api.default_model]
    req = contract.validate_completion(
        {"model": model.name, "prompt": "x", "max_tokens": 2, BEAMS: 2, BANNED: [7]}
    )
    sent = upstream_body(req, model.name, api)
    assert (sent[BEAMS], sent[BANNED]) == (2, [7])


def test_a_golden_case_of_a_field_that_multiplies_sequences_expects_them_all(api: Spec) -> None:
    """What an accepted case may generate is what the gate prices it at: beams x max_tokens."""
    cases = {c["id"]: c for found in generate(api).values() for c in found}
    most = api.schema("CompletionRequest")["properties"][BEAMS]["maximum"]
    at = cases[f"range.{BEAMS}.maximum.at"]
    assert at["request"]["body"][BEAMS] == most
    assert at["expect"]["generates"] == most * at["request"]["body"]["max_tokens"]


def test_golden_cases_cover_the_new_fields_and_tag_them_by_feature(
    api: Spec, tmp_path: Path
) -> None:
    def beams_cases(spec: Spec) -> dict[str, list[str]]:
        return {
            c["id"]: c["tags"]
            for cases in generate(spec).values()
            for c in cases
            if BEAMS in c["id"] or BANNED in c["id"]
        }

    cases = beams_cases(api)
    assert {
        f"type.{BEAMS}.string",
        f"range.{BEAMS}.maximum.past",
        f"type.{BANNED}.object",
        f"range.{BANNED}.minItems.past",
        f"model.{BANNED}.vocab.at",
        f"model.{BANNED}.vocab.past",
    } <= set(cases)
    assert all(tags == ["validation"] for tags in cases.values()), cases
    raw = with_new_fields(load_spec().raw)  # beams a streaming feature: its cases tagged so
    raw["components"]["schemas"]["CompletionRequest"]["properties"][BEAMS]["x-kind"] |= {
        "feature": "streaming"
    }
    tagged = beams_cases(load(raw, tmp_path))
    assert tagged[f"range.{BEAMS}.maximum.past"] == ["validation", "streaming"]
    assert tagged[f"model.{BANNED}.vocab.at"] == ["validation"]


def test_what_still_needs_code_is_named_the_effect_and_its_check(api: Spec) -> None:
    checked = {f for c in REGISTRY for f in c.effects}
    assert set(observable_effects(api)) - checked == {BEAMS, BANNED, LISTED}


def test_the_core_holds_the_new_rule_as_the_spec_words_it(api: Spec) -> None:
    contract, model = Contract(api), api.models[api.default_model]
    body = {"model": model.name, "prompt": "The sky is", "max_tokens": 1, LISTED: [5]}
    with pytest.raises(ApiError) as refused:
        contract.validate_completion(body)
    assert contract.errors.body(refused.value, "r")["error"] == {
        "message": f"{LISTED} needs logprobs.",
        "type": "invalid_request_error",
        "param": LISTED,
        "code": "invalid_request",
    }
    assert contract.validate_completion({**body, "logprobs": 0}).body[LISTED] == [5]


def test_the_rules_golden_cases_are_its_examples_and_every_accepted_case_meets_it(
    api: Spec,
) -> None:
    cases = {c["id"]: c for found in generate(api).values() for c in found}
    refused, accepted = cases[f"rule.{RULE}.alone"], cases[f"rule.ok.{LISTED}.with_logprobs"]
    assert refused["expect"]["status"] == 400
    assert refused["expect"]["body"]["error"]["message"] == f"{LISTED} needs logprobs."
    assert (
        refused["request"]["body"][LISTED] == [5] and "logprobs" not in refused["request"]["body"]
    )
    assert (accepted["expect"]["status"], accepted["request"]["body"]["logprobs"]) == (200, 0)
    # the field's own accepted cases, written by the fields and caps families, meet the rule:
    # logprobs filled by the one helper (its minimum), and the core accepts each (generate
    # asserts it as it writes)
    own = [c for c in cases.values() if LISTED in c["id"] and c["expect"]["status"] == 200]
    assert {c["id"] for c in own} >= {f"model.{LISTED}.vocab.at", f"rule.ok.{LISTED}.with_logprobs"}
    lowest = api.schema("CompletionRequest")["properties"]["logprobs"]["minimum"]
    assert all(c["request"]["body"].get("logprobs") == lowest for c in own), own


def test_an_example_the_core_disagrees_with_fails_where_the_cases_are_written(
    tmp_path: Path,
) -> None:
    raw = with_new_fields(load_spec().raw)
    (rule,) = [r for r in raw["x-rules"] if r["id"] == RULE]
    rule["examples"]["accepted"][f"{LISTED}.with_logprobs"].pop("logprobs")
    rule["examples"]["accepted"][f"{LISTED}.with_logprobs"]["logprobs"] = None
    with pytest.raises(SpecError) as refused:
        generate(load(raw, tmp_path))
    assert str(refused.value) == (
        f"golden case rule.ok.{LISTED}.with_logprobs: the core refuses it: {LISTED} needs logprobs."
    )
    rule["examples"]["accepted"][f"{LISTED}.with_logprobs"]["logprobs"] = 0
    rule["examples"]["refused"]["alone"]["logprobs"] = 1
    with pytest.raises(SpecError) as accepted:
        generate(load(raw, tmp_path))
    assert (
        str(accepted.value)
        == f"golden case rule.{RULE}.alone: the core accepts what {RULE} refuses"
    )
    del rule["examples"]
    with pytest.raises(SpecError) as bare:
        load(raw, tmp_path)
    assert str(bare.value).endswith(
        f"x-rules ['{RULE}'] carry no refused example (examples.refused)"
    )


def test_the_gate_holds_an_answer_to_the_new_row_as_the_spec_says_it(api: Spec) -> None:
    def answer(row: list[dict[str, float]]) -> dict[str, Any]:
        logprobs = {
            "tokens": [" blue"],
            "token_logprobs": [-0.5],
            "top_logprobs": [{" blue": -0.5}],
            "text_offset": [0],
            ROW: row,
        }
        choice = {"index": 0, "text": " blue", "logprobs": logprobs, "finish_reason": "length"}
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": api.default_model,
            "choices": [choice],
            "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5},
        }

    completion = api.schema("Completion")
    assert schema_errors(answer([{"5": -2.5}]), completion) == []
    (error,) = schema_errors(answer([{"5": 0.5}]), completion)
    assert error.startswith(f"choices/0/logprobs/{ROW}/0/5: 0.5 is greater than the maximum of 0")
    assert schema_errors(answer([{"5": 0.5}]), load_spec().schema("Completion")) == []


def test_a_token_id_field_not_held_to_the_vocabulary_is_refused_naming_where(
    tmp_path: Path,
) -> None:
    raw = with_new_fields(load_spec().raw)
    rule = next(r for r in raw["x-model-rules"] if r["id"] == "token_id_in_vocab")
    rule["params"].remove(BANNED)
    with pytest.raises(SpecError) as refused:
        load(raw, tmp_path)
    assert str(refused.value).endswith(
        f"x-model-rules token_id_in_vocab's params lack ['{BANNED}'] (x-kind token_ids)"
    )
    raw = with_new_fields(load_spec().raw)
    raw["components"]["schemas"]["CompletionRequest"]["properties"][BEAMS]["x-kind"] = {
        "tokens": "beams"
    }
    with pytest.raises(SpecError) as unknown:
        load(raw, tmp_path)
    assert str(unknown.value).endswith(
        f"the x-kind of {BEAMS} says tokens: 'beams', not one of (None, 'sequences', 'length')"
    )
