"""The core's own behaviour beyond the golden cases."""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import yaml
from openapi_spec_validator import validate

import contract
from contract import (
    Contract,
    InsufficientQuota,
    Spec,
    SpecError,
    encode_tensor,
    hold,
    load_spec,
    spec,
)
from contract.tokens import encode
from tests.support.contract import CONTRACT

ROOT = Path(__file__).resolve().parents[2]
MODEL = spec().default_model


def test_openapi_spec_validator_accepts_the_spec() -> None:
    validate(spec().raw)


def test_a_broken_spec_fails_fast_with_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "openapi.yaml"
    bad.write_text("openapi: 3.1.0\ninfo: {title: x}\npaths: {}\n")
    with pytest.raises(SpecError, match="not valid OpenAPI"):
        load_spec(bad)
    bare = tmp_path / "bare.yaml"
    bare.write_text("openapi: 3.1.0\ninfo: {title: x, version: '1'}\npaths: {}\n")
    with pytest.raises(SpecError, match="lacks the extensions x-models"):
        load_spec(bare)


def test_an_x_rule_without_its_schema_entry_fails_fast(tmp_path: Path) -> None:
    raw = copy.deepcopy(spec().raw)
    entries = raw["components"]["schemas"]["CompletionRequest"]["allOf"]
    dropped = entries.pop(0)["x-rule"]
    broken = tmp_path / "openapi.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=f"x-rules \\['{dropped}'\\] have no entry"):
        load_spec(broken)


def test_each_rule_breaks_exactly_when_its_schema_entry_fails() -> None:
    body = {"model": MODEL, "prompt": "x", "stream_options": {}}
    broken = [
        r["id"]
        for r in spec().rules
        if not jsonschema.Draft202012Validator(r["schema"]).is_valid(body)
    ]
    assert broken == ["stream_options_without_stream"]
    assert [e.rule for e in CONTRACT.iter_errors(body)] == broken


def test_llama3_tokenizer_counts_like_vllm() -> None:
    model = spec().models[MODEL]
    assert encode(model, "The sky is", add_special_tokens=False) == [791, 13180, 374]
    assert encode(model, "The sky is") == [model.bos_token_id, 791, 13180, 374]
    req = CONTRACT.validate_completion({"model": MODEL, "prompt": "The sky is", "max_tokens": 1})
    assert req.prompt_token_counts == [4]
    ids = CONTRACT.validate_completion({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 1})
    assert ids.prompt_token_counts == [3]


def test_default_max_tokens_is_max_model_len_less_the_prompt_within_the_caps() -> None:
    model, caps = spec().models[MODEL], spec().caps
    assert (
        CONTRACT.validate_completion({"model": MODEL, "prompt": "x"}).max_tokens
        == caps["max_tokens_without_stream"]
    )
    assert (
        CONTRACT.validate_completion({"model": MODEL, "prompt": "x", "stream": True}).max_tokens
        == caps["max_generated_tokens"]
    )
    near = model.max_model_len - 10
    req = CONTRACT.validate_completion({"model": MODEL, "prompt": [5] * near})
    assert req.max_tokens == 10 and req.max_tokens_defaulted


def test_a_deployment_sets_its_own_max_model_len() -> None:
    from dataclasses import replace

    small = {MODEL: replace(spec().models[MODEL], max_model_len=64)}
    assert (
        CONTRACT.validate_completion({"model": MODEL, "prompt": [5] * 60}, models=small).max_tokens
        == 4
    )


def test_hold_passes_clamps_and_refuses() -> None:
    assert hold([4], 1, 10, None) == contract.Hold(10, False, 14)
    assert hold([4], 1, 10, 14) == contract.Hold(10, False, 14)
    assert hold([4, 4], 2, 10, 20) == contract.Hold(3, True, 20)
    with pytest.raises(InsufficientQuota) as err:
        hold([4, 4], 2, 10, 11)
    assert CONTRACT.errors.status(err.value) == spec().error_codes["insufficient_quota"]["status"]
    assert CONTRACT.errors.message(err.value) == spec().messages["insufficient_quota"].format(
        remaining=11, prompt_tokens=8, sequences=4
    )


def test_steering_vectors_decode_to_their_values() -> None:
    model = spec().models[MODEL]
    values = np.arange(2 * model.hidden_size, dtype=np.float32).reshape(2, model.hidden_size)
    wire = {
        "activations": encode_tensor(values, "torch.float32"),
        "layer_indices": [3, 4],
        "scale": 0.5,
    }
    req = CONTRACT.validate_completion(
        {"model": MODEL, "prompt": "x", "max_tokens": 1, "apply_steering_vectors": [wire]}
    )
    (vector,) = req.steering
    assert (
        np.array_equal(vector.values, values)
        and vector.layer_indices == (3, 4)
        and vector.scale == 0.5
    )


def test_several_errors_come_out_in_the_spec_order() -> None:
    body = {"model": MODEL, "prompt": "x", "temperature": 5, "n": "2", "best_of": 1, "echo": 1}
    errors = list(CONTRACT.request_schema.iter_errors(body))
    assert [type(e).__name__ for e in errors] == [
        "UnknownField",
        "InvalidType",
        "InvalidType",
        "OutOfRange",
    ]
    assert [e.param for e in errors] == ["best_of", "n", "echo", "temperature"]
    with pytest.raises(contract.UnknownField):
        CONTRACT.validate_completion(body)
    assert [e.param for e in CONTRACT.iter_errors(body)] == ["best_of", "n", "echo", "temperature"]
    rules = {
        "model": MODEL,
        "prompt": ["a", "b"],
        "output_residual_stream": [0],
        "stream_options": {},
    }
    assert [e.rule for e in CONTRACT.iter_errors(rules)] == [
        "max_tokens_required",
        "stream_options_without_stream",
        "lens_one_prompt",
    ]


def test_scale_must_be_finite_even_when_json_cannot_say_it() -> None:
    model = spec().models[MODEL]
    wire = {
        "activations": encode_tensor(np.zeros((1, model.hidden_size), np.float32), "torch.float32"),
        "layer_indices": [0],
        "scale": float("inf"),
    }
    with pytest.raises(contract.RuleViolation) as err:
        CONTRACT.validate_completion(
            {"model": MODEL, "prompt": "x", "max_tokens": 1, "apply_steering_vectors": [wire]}
        )
    rule, param = spec().model_rules["steering_vector"], "apply_steering_vectors[0]"
    assert CONTRACT.errors.message(err.value) == rule["message"].format(
        param=param, reason=rule["reasons"]["scale"]
    )


def test_error_bodies_never_echo_a_whole_input() -> None:
    huge = "x" * 100_000
    with pytest.raises(contract.ApiError) as err:
        CONTRACT.validate_completion({"model": MODEL, "prompt": "x", "stop": [huge] * 5})
    assert len(json.dumps(CONTRACT.errors.body(err.value, "req_0"))) < 500


def test_the_core_imports_no_web_framework_http_client_or_vllm() -> None:
    banned = {
        "flask",
        "werkzeug",
        "gunicorn",
        "httpx",
        "requests",
        "urllib3",
        "vllm",
        "aiohttp",
        "openai",
    }
    for path in (ROOT / "contract").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"


def test_public_names_are_pinned() -> None:
    # Written out here, so that a name added to or dropped from the core's API shows in review.
    pinned = """ApiError ChatRefused CompletionRequest ContextLengthExceeded Contract DeadlineExceeded
        DeadlineInfeasible Errors Hold InferenceUnavailable InsufficientQuota InternalError InvalidApiKey
        InvalidJson InvalidRequest InvalidType Message MethodNotAllowed MetricsContract MissingField ModelInfo
        ModelNotFound NotFound OutOfRange RequestTooLarge RuleViolation Spec SpecError SteeringVector UnknownField
        UnsupportedMediaType UnsupportedTransferCoding encode_tensor hold load_spec parse_json spec"""
    assert sorted(contract.__all__) == sorted(pinned.split())
    for name in contract.__all__:
        assert getattr(contract, name) is not None


def test_every_error_code_has_a_class_with_its_status() -> None:
    classes = {cls.code for cls in _subclasses(contract.ApiError)}
    assert classes == set(spec().error_codes)


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def test_integer_valued_floats_become_ints_where_the_schema_says_integer() -> None:
    model = spec().models[MODEL]
    wire = {
        "activations": encode_tensor(
            np.zeros((1, 2, model.hidden_size), np.float32), "torch.float32"
        ),
        "layer_indices": [1.0],
        "position_indices": [0.0, 1.0],
    }
    wire["activations"]["shape"] = [1.0, 2.0, float(model.hidden_size)]
    req = CONTRACT.validate_completion(
        {
            "model": MODEL,
            "prompt": [[1.0, 2], [3]],
            "max_tokens": 2.0,
            "n": 1.0,
            "temperature": 1.0,
            "apply_steering_vectors": [wire],
        }
        | {"prompt": [1.0, 2]}
    )
    assert req.prompts == [[1, 2]] and all(type(i) is int for i in req.prompts[0])
    assert type(req.max_tokens) is int and type(req.body["n"]) is int
    assert req.body["temperature"] == 1.0 and req.steering[0].layer_indices == (1,)
    several = CONTRACT.validate_completion(
        {"model": MODEL, "prompt": [[1.0, 2], [3]], "max_tokens": 1}
    )
    assert several.prompts == [[1, 2], [3]]


def test_null_inside_a_steering_vector_means_left_out() -> None:
    model = spec().models[MODEL]
    defaults = spec().schema("SteeringVector")["properties"]
    wire = {
        "activations": encode_tensor(np.zeros((1, model.hidden_size), np.float32), "torch.float32"),
        "layer_indices": [0],
        "scale": None,
        "norm_match": None,
        "position_indices": None,
    }
    (vector,) = CONTRACT.validate_completion(
        {"model": MODEL, "prompt": "x", "max_tokens": 1, "apply_steering_vectors": [wire]}
    ).steering
    assert vector.scale == defaults["scale"]["x-default"]
    assert vector.norm_match == defaults["norm_match"]["x-default"]


def test_the_body_cap_holds_on_every_route() -> None:
    over = spec().caps["max_body_bytes"] + 1
    for route in spec().routes:
        with pytest.raises(contract.RequestTooLarge):
            CONTRACT.preflight(
                route.method, route.path, {"Authorization": "Bearer k"}, over, keys=None
            )


def test_the_error_tree_drawn_in_errors_py_is_the_class_tree() -> None:
    """Each class in the drawing sits under its base class, with its code where one is drawn."""
    from contract import errors

    parents: list[str] = []
    drawn = 0
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^ {4}((?:[│ ] {3})*)(?:[├└]── )?([A-Z]\w+)\s*(?:(\d{3}) (\w+))?", line)
        if not match or not hasattr(errors, match.group(2)):
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        name = match.group(2)
        cls = getattr(errors, name)
        del parents[depth:]
        if parents:
            assert cls.__bases__[0].__name__ == parents[-1], name
        if match.group(4):
            assert (cls.code, CONTRACT.errors.status(cls(name))) == (
                match.group(4),
                int(match.group(3)),
            ), name
        parents.append(name)
        drawn += 1
    assert drawn == len(
        [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ApiError)]
    )


def test_one_code_to_class_table_covers_every_code_of_the_spec() -> None:
    from contract.errors import code_classes, rule_classes

    assert set(code_classes()) == set(spec().error_codes)
    assert all(cls.code == code for code, cls in code_classes().items())
    assert set(rule_classes()) == {
        r["code"]
        for r in [*spec().rules, *spec().model_rules.values(), *spec().token_rules.values()]
    }


def swapped_order(first: str, second: str) -> Contract:
    """The Contract of a copy of the spec whose x-check-order swaps two stages."""
    raw = copy.deepcopy(spec().raw)
    order = raw["x-check-order"]
    i, j = order.index(first), order.index(second)
    order[i], order[j] = order[j], order[i]
    return Contract(Spec(spec().path, raw))


def test_x_check_order_orders_the_independent_stages() -> None:
    """Swap auth and body_size in the spec's list: a keyless oversized body gets 413, not 401."""
    path, over = spec().completions_path, spec().caps["max_body_bytes"] + 1
    with pytest.raises(contract.InvalidApiKey):
        CONTRACT.preflight("POST", path, {}, over, keys=None)
    with pytest.raises(contract.RequestTooLarge):
        swapped_order("auth", "body_size").preflight("POST", path, {}, over, keys=None)


@pytest.mark.parametrize(
    "coding,refused",
    [
        ("chunked", False),
        ("Chunked", False),
        ("gzip, chunked", True),
        ("identity, chunked", True),
        ("br,chunked", True),
        ("chunked, gzip", True),
    ],
)
def test_a_transfer_coding_but_chunked_is_refused_where_a_body_is_read(
    coding: str, refused: bool
) -> None:
    """501 on the completions route, after auth and before the media type (x-check-order); the
    chat route is refused before its body whatever the coding; a GET reads no body."""
    path, auth = spec().completions_path, {"Authorization": "Bearer k"}
    headers = {**auth, "Transfer-Encoding": coding}
    if refused:
        with pytest.raises(contract.UnsupportedTransferCoding) as error:
            CONTRACT.preflight("POST", path, headers, None, keys=None)
        assert CONTRACT.errors.body(error.value, "req_x")["error"] == {
            "message": spec().messages["unsupported_transfer_coding"],
            "type": spec().error_codes["unsupported_transfer_coding"]["type"],
            "param": None,
            "code": "unsupported_transfer_coding",
        }
        assert CONTRACT.errors.status(error.value) == spec().error_codes[error.value.code]["status"]
        with pytest.raises(contract.InvalidApiKey):  # auth comes first
            CONTRACT.preflight("POST", path, {"Transfer-Encoding": coding}, None, keys=None)
    else:
        with pytest.raises(contract.UnsupportedMediaType):  # the next stage's
            CONTRACT.preflight("POST", path, headers, None, keys=None)
    with pytest.raises(contract.ChatRefused):
        CONTRACT.preflight("POST", "/v1/chat/completions", headers, None, keys=None)
    assert CONTRACT.preflight("GET", "/v1/models", headers, None, keys=None).key == "k"


def test_a_spec_that_reorders_dependent_stages_fails_at_load(tmp_path: Path) -> None:
    raw = copy.deepcopy(spec().raw)
    order = raw["x-check-order"]
    i, j = order.index("model"), order.index("token_caps")
    order[i], order[j] = order[j], order[i]
    bad = tmp_path / "openapi.yaml"
    bad.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(SpecError, match="reorders stages that depend on each other"):
        load_spec(bad)
    raw["x-check-order"] = [s for s in order if s != "budget"]
    bad.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(SpecError, match="must list each of"):
        load_spec(bad)


def test_x_check_order_orders_the_schema_stages() -> None:
    body = {"model": MODEL, "prompt": "x", "bogus": 1, "max_tokens": "many"}
    assert isinstance(next(CONTRACT.iter_errors(body)), contract.UnknownField)
    assert isinstance(
        next(swapped_order("unknown_field", "type").iter_errors(body)), contract.InvalidType
    )


def test_request_ids_have_the_specs_form_and_differ_in_forked_workers() -> None:
    """gunicorn forks its workers from a master that made ids already: each worker's
    ids must still be its own (the random module reseeds in a forked child)."""
    import os

    rid = spec().request_id
    form = re.compile(re.escape(rid["prefix"]) + f"[0-9a-f]{{{rid['hex_digits']}}}")
    CONTRACT.errors.new_request_id()
    read, write = os.pipe()
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            os.write(write, (CONTRACT.errors.new_request_id() + "\n").encode())
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    os.close(write)
    with os.fdopen(read) as f:
        ids = f.read().split()
    ids.append(CONTRACT.errors.new_request_id())
    assert len(ids) == 3 and len(set(ids)) == 3
    assert all(form.fullmatch(i) for i in ids)


def test_the_special_token_pattern_matches_the_tokenizers_special_tokens_and_no_other() -> None:
    """x-models special_token_pattern, which the gate's logprobs checks read, says exactly the
    model's tokenizer's special tokens: every one of them, and no regular token's text."""
    import re

    import quicktok

    api = spec()
    for name, model in api.models.items():
        pattern = api.special_token_pattern(name)
        if pattern is None:
            continue
        enc = quicktok.get_encoding(model.tokenizer_encoding)
        compiled = re.compile(pattern)
        assert all(compiled.fullmatch(s) for s in enc.special_tokens_set)
        assert all(compiled.fullmatch(t) for t in api.special_tokens(name).values())
        regular = [
            i
            for i in range(model.bos_token_id)
            if compiled.fullmatch(enc.decode_single_token_bytes(i).decode("utf-8", "replace"))
        ]
        assert regular == []
