"""Hostile input through the core (api-decisions.md, "Hostile input"): each kind the
attack of issue 10 found, refused with the API's error, sized before anything is built."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
import zstandard

from contract import ApiError, InvalidJson, encode_tensor, parse_json, spec
from tests.support.contract import CONTRACT

MODEL = spec().default_model


def body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "The sky is", "max_tokens": 1, **fields}


def refusal(raw: bytes) -> ApiError:
    with pytest.raises(ApiError) as info:
        CONTRACT.validate_completion(parse_json(raw))
    return info.value


def error_of(payload: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiError) as info:
        CONTRACT.validate_completion(payload)
    return CONTRACT.errors.body(info.value, "req_x")["error"]


# -- text that is not Unicode scalar values --------------------------------------------
LONE = ["\\ud800", "\\udc00\\ud800", "\\uDBFF", "a\\udfffb"]
PLACES = {
    "prompt": lambda s: f'{{"model":"{MODEL}","prompt":"{s}","max_tokens":1}}',
    "key": lambda s: f'{{"model":"{MODEL}","prompt":"a","max_tokens":1,"{s}":1}}',
    "model": lambda s: f'{{"model":"{s}","prompt":"a","max_tokens":1}}',
    "stop": lambda s: f'{{"model":"{MODEL}","prompt":"a","max_tokens":1,"stop":["x","{s}"]}}',
    "priority": lambda s: f'{{"model":"{MODEL}","prompt":"a","max_tokens":1,"priority":"{s}"}}',
    "dtype": lambda s: (
        f'{{"model":"{MODEL}","prompt":"a","max_tokens":1,"apply_steering_vectors":'
        f'[{{"layer_indices":[0],"activations":{{"data":"","dtype":"{s}",'
        f'"original_dtype":"torch.float32","shape":[1,1],"compression":"zstd"}}}}]}}'
    ),
    "nested key": lambda s: (
        f'{{"model":"{MODEL}","prompt":"a","max_tokens":1,"stream_options":{{"{s}":1}}}}'
    ),
}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("lone", LONE)
def test_a_lone_surrogate_escape_anywhere_is_invalid_json(place: str, lone: str) -> None:
    error = refusal(PLACES[place](lone).encode())
    assert isinstance(error, InvalidJson)
    assert CONTRACT.errors.body(error, "req_x")["error"] == {
        "message": spec().messages["invalid_json"],
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_json",
    }


@pytest.mark.parametrize("place", ["prompt", "key", "model", "stop"])
def test_a_raw_surrogate_in_utf8_is_invalid_json(place: str) -> None:
    raw = PLACES[place]("X").encode().replace(b"X", b"\xed\xa0\x80")
    assert isinstance(refusal(raw), InvalidJson)


def test_a_surrogate_pair_is_a_character_and_is_accepted() -> None:
    raw = f'{{"model":"{MODEL}","prompt":"smile \\ud83d\\ude00","max_tokens":1}}'.encode()
    assert CONTRACT.validate_completion(parse_json(raw)).prompt_texts == ["smile \U0001f600"]


def test_an_escaped_backslash_before_u_d800_is_plain_text() -> None:
    raw = f'{{"model":"{MODEL}","prompt":"\\\\ud800","max_tokens":1}}'.encode()
    assert CONTRACT.validate_completion(parse_json(raw)).prompt_texts == ["\\ud800"]


def test_a_utf8_bom_is_ignored_and_other_encodings_are_not_json() -> None:
    text = json.dumps(body())
    assert parse_json(b"\xef\xbb\xbf" + text.encode()) == body()
    with pytest.raises(InvalidJson):
        parse_json(text.encode("utf-16"))


# -- steering vectors: one frame, sized before it is decoded ----------------------------
def vector(acts: dict[str, Any], layers: int = 1) -> dict[str, Any]:
    return {"activations": acts, "layer_indices": list(range(layers))}


def zeros(*shape: int) -> dict[str, Any]:
    return encode_tensor(np.zeros(shape, np.float32), "torch.float32")


def steering_error(reason: str, index: int = 0, **fields: Any) -> dict[str, Any]:
    rule = spec().model_rules["steering_vector"]
    param = f"apply_steering_vectors[{index}]"
    text = rule["message"].format(param=param, reason=rule["reasons"][reason].format(**fields))
    return {"message": text, "type": "invalid_request_error", "param": param, "code": rule["code"]}


def frame_of(acts: dict[str, Any]) -> bytes:
    return base64.b64decode(acts["data"])


def with_frame(acts: dict[str, Any], frame: bytes) -> dict[str, Any]:
    return {**acts, "data": base64.b64encode(frame).decode()}


@pytest.mark.parametrize("tail", [b"junk", b"\0", "second frame"])
def test_anything_after_the_one_frame_is_refused(tail: Any) -> None:
    acts = zeros(1, spec().models[MODEL].hidden_size)
    frame = frame_of(acts)
    bad = with_frame(acts, frame + (frame if tail == "second frame" else tail))
    assert error_of(body(apply_steering_vectors=[vector(bad)])) == steering_error("zstd")


def _declaring(frame: bytes, size: int) -> bytes:
    """The frame with its header's 2-byte content size field rewritten (a single-segment
    frame of 256..65791 bytes keeps it right after the descriptor: RFC 8878 3.1.1.1)."""
    descriptor = frame[4]
    assert descriptor >> 6 == 1 and descriptor & 0x20, (
        "expected a single-segment frame with a 2-byte size"
    )
    return frame[:5] + (size - 256).to_bytes(2, "little") + frame[7:]


@pytest.mark.parametrize("actual_delta", [-4, 4])
def test_a_frame_that_lies_about_its_size_is_refused(actual_delta: int) -> None:
    hidden = spec().models[MODEL].hidden_size
    want = hidden * 4
    real = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * (want + actual_delta))
    lying = _declaring(real, want)
    assert zstandard.get_frame_parameters(lying).content_size == want
    acts = with_frame(zeros(1, hidden), lying)
    assert error_of(body(apply_steering_vectors=[vector(acts)])) == steering_error("zstd")


def test_a_shape_past_max_model_len_positions_is_refused_before_decoding() -> None:
    """Issue 10: 262 bytes declaring 1 TiB answered 500 MemoryError."""
    model = spec().models[MODEL]
    acts = {**zeros(1, model.hidden_size), "shape": [1, 67108864, model.hidden_size]}
    assert error_of(body(apply_steering_vectors=[vector(acts)])) == steering_error(
        "positions", got=67108864, max_model_len=model.max_model_len
    )


def test_the_decoded_cap_is_checked_from_the_shape_before_decoding() -> None:
    """Issue 10: a 44 KB body grew a worker by 2 GiB; the frame here is a few bytes and lies."""
    model, cap = spec().models[MODEL], spec().caps["steering_decoded_bytes"]
    positions = cap // (model.hidden_size * 4) + 1
    assert positions <= model.max_model_len
    acts = {**zeros(1, model.hidden_size), "shape": [1, positions, model.hidden_size]}
    total = positions * model.hidden_size * 4
    assert error_of(body(apply_steering_vectors=[vector(acts)])) == steering_error(
        "decoded_cap", cap=cap, total=total
    )


def test_the_decoded_cap_counts_every_vector_of_the_request() -> None:
    model, cap = spec().models[MODEL], spec().caps["steering_decoded_bytes"]
    per = cap // 2 // (model.hidden_size * 4)  # two of these fit, a third does not
    one = vector(zeros(1, per, model.hidden_size))
    size = per * model.hidden_size * 4
    assert len(CONTRACT.validate_completion(body(apply_steering_vectors=[one, one])).steering) == 2
    assert error_of(body(apply_steering_vectors=[one, one, one])) == steering_error(
        "decoded_cap", index=2, cap=cap, total=3 * size
    )


# -- priority as a string: an int64 like the number -------------------------------------
INT64 = spec().schema("CompletionRequest")["properties"]["priority"]["anyOf"][0]


@pytest.mark.parametrize("value", [INT64["maximum"], INT64["minimum"], 0, -1, 7])
def test_priority_strings_in_the_int64_range_are_accepted(value: int) -> None:
    CONTRACT.validate_completion(body(priority=str(value)))
    CONTRACT.validate_completion(body(priority=value))


@pytest.mark.parametrize("value", [INT64["maximum"] + 1, INT64["minimum"] - 1, 9999999999999999999])
def test_priority_strings_past_int64_are_refused_like_the_number(value: int) -> None:
    """Issue 10: "9999999999999999999" was accepted while the number got 400."""
    assert error_of(body(priority=value))["param"] == "priority"
    assert error_of(body(priority=str(value))) == {
        "message": spec().messages["range"]["pattern"].format(param="priority"),
        "type": "invalid_request_error",
        "param": "priority",
        "code": "invalid_request",
    }


# -- no echo: input quoted at most quoted_chars characters -------------------------------
def cut(text: str) -> str:
    limit = spec().caps["quoted_chars"]
    return text[:limit] + spec().messages["cut_mark"]


def test_a_long_model_name_is_cut_in_the_message() -> None:
    """Issue 10: a 1 MB model name came back in a 1 MB 404."""
    name = "m" * 1_000_000
    with pytest.raises(ApiError) as info:
        CONTRACT.validate_completion(body(model=name))
    assert CONTRACT.errors.body(info.value, "req_x")["error"] == {
        "message": spec().messages["model_not_found"].format(model=cut(name)),
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_a_long_unknown_key_is_cut_in_the_message_and_the_param() -> None:
    """Issue 10: a 1 MB unknown key came back twice, in a 2 MB body."""
    key = "k" * 1_000_000
    assert error_of({**body(), key: 1}) == {
        "message": spec().messages["unknown_field"].format(field=cut(key)),
        "type": "invalid_request_error",
        "param": cut(key),
        "code": "invalid_request",
    }


def test_a_value_of_exactly_quoted_chars_is_quoted_whole() -> None:
    name = "n" * spec().caps["quoted_chars"]
    assert error_of(body(model=name))["message"] == spec().messages["model_not_found"].format(
        model=name
    )


def test_fill_cuts_input_strings_but_not_numbers() -> None:
    from contract import Message

    long = "z" * 500
    assert (
        CONTRACT.errors.fill(Message(text="{a} {b}", fields={"a": long, "b": 10**30}))
        == f"{cut(long)} {10**30}"
    )


def _digits(k: int, digit: int) -> int:
    """The int written as `k` times `digit` (no int-from-str: past 4,300 digits it raises)."""
    return digit * (10**k - 1) // 9


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("extra", [-1, 0, 1, 2, 3, 4, 5, 4300, 20_000])
def test_fill_cuts_an_integer_longer_than_quoted_chars_to_its_leading_digits(
    extra: int, sign: int
) -> None:
    """A 4,000-digit max_tokens came back whole, twice, in the budget's message; a product of
    such numbers past Python's 4,300-digit str limit raised (a 500)."""
    from contract import Message

    limit = spec().caps["quoted_chars"]
    k = limit + extra
    sevens, power = _digits(k, 7) * sign, 10**k * sign
    minus = "-" if sign < 0 else ""
    texts = [minus + "7" * k, minus + "1" + "0" * k]
    expected = [t if len(t) <= limit else cut(t) for t in texts]
    filled = CONTRACT.errors.fill(Message(text="{a} {b}", fields={"a": sevens, "b": power}))
    assert filled == " ".join(expected)


def test_a_budget_total_past_the_str_limit_is_refused_with_its_numbers_cut() -> None:
    rule = spec().token_rules["generated_tokens_cap"]
    n = spec().schema("CompletionRequest")["properties"]["n"]["maximum"]
    prompts, k = 12, 4299  # max_tokens of 4,299 nines: the JSON parser's last length
    max_tokens = _digits(k, 9)
    limit = spec().caps["quoted_chars"]
    # n x prompts x (10^k - 1) = (n x prompts - 1), then nines, then the rest: its head
    head = str(n * prompts - 1)
    assert error_of(body(prompt=["a"] * prompts, n=n, max_tokens=max_tokens)) == {
        "message": rule["message"].format(
            cap=spec().caps["max_generated_tokens"],
            n=n,
            max_tokens=cut("9" * k),
            prompts=prompts,
            total=cut(head + "9" * limit),
        ),
        "type": "invalid_request_error",
        "param": rule["param"],
        "code": rule["code"],
    }


# -- the generated-token cap comes before the tokenizer ------------------------------------
def test_many_prompts_past_the_generated_cap_are_refused_before_tokenizing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2 million one-character prompts grew a worker by 300 MiB of token lists (bench/memory_bench.py)."""
    import contract.request

    cap = spec().caps["max_generated_tokens"]
    calls: list[str] = []
    monkeypatch.setattr(
        contract.request, "encode", lambda model, text, add: calls.append(text) or [1]
    )
    # half the cap's prompts, two tokens each: one past the cap (more prompts than the cap
    # are past the list's own bound, a range error: test_a_million_bad_words...'s kind)
    prompts = ["a"] * (cap // 2 + 1)
    rule = spec().token_rules["generated_tokens_cap"]
    assert error_of(body(prompt=prompts, max_tokens=2)) == {
        "message": rule["message"].format(
            cap=cap, n=1, max_tokens=2, prompts=len(prompts), total=2 * len(prompts)
        ),
        "type": "invalid_request_error",
        "param": rule["param"],
        "code": rule["code"],
    }
    assert error_of(body(prompt=["a"] * (cap + 1)))["message"] == spec().messages["range"][
        "maxItems"
    ].format(param="prompt", limit=cap)
    assert calls == []


# -- lists past their bounds (issue 44: a million bad words were accepted) ----------------
def lists_of(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every array schema a request may hold, with where it is."""
    if "$ref" in schema:
        return lists_of(spec().schema(schema["$ref"].rsplit("/", 1)[1]), path)
    found = []
    types = schema.get("type")
    if types == "array" or (isinstance(types, list) and "array" in types):
        found.append((path, schema))
    for i, option in enumerate(schema.get("anyOf", [])):
        found += lists_of(option, f"{path}|{i}")
    if "items" in schema:
        found += lists_of(schema["items"], f"{path}[]")
    for name, prop in schema.get("properties", {}).items():
        found += lists_of(prop, f"{path}.{name}")
    return found


def test_every_list_a_request_may_hold_has_a_bound_from_x_caps() -> None:
    api = spec()
    lists = lists_of({"properties": api.schema("CompletionRequest")["properties"]}, "")
    assert len(lists) > 10
    unbounded = [path for path, schema in lists if "maxItems" not in schema]
    assert unbounded == []
    caps = api.caps
    assert caps["token_list_items"] == caps["max_body_bytes"] // len("0,")  # the most a body holds
    for model in api.models.values():  # the per-model rules are the tighter bounds
        assert caps["token_list_items"] >= max(model.vocab_size, model.max_model_len)
        assert caps["list_items"] >= model.num_layers


def test_a_million_bad_words_are_refused_before_any_is_read() -> None:
    bound = spec().caps["list_items"]
    assert error_of(body(bad_words=["w"] * 1_000_000)) == {
        "message": spec().messages["range"]["maxItems"].format(param="bad_words", limit=bound),
        "type": "invalid_request_error",
        "param": "bad_words",
        "code": "invalid_request",
    }
    assert error_of(body(bad_words=[f"w{i}" for i in range(bound)], max_tokens=0))["param"] == (
        "max_tokens"
    )  # at the bound the list passes; the next field's range speaks


def test_a_bad_word_of_whitespace_alone_is_refused_as_vllm_refuses_it() -> None:
    """vLLM strips a bad word's leading whitespace (str.lstrip) before it tokenizes it and
    refuses a word left with no token; the core refuses each such word first, worded by the
    word's own message, and takes every word with a character str.isspace does not match."""
    import sys

    items = spec().schema("CompletionRequest")["properties"]["bad_words"]["items"]
    refused = {
        "message": items["x-range-messages"]["pattern"].format(param="bad_words"),
        "type": "invalid_request_error",
        "param": "bad_words",
        "code": "invalid_request",
    }
    whitespace = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()]
    assert len(whitespace) == 29  # Python 3.11's: a change of it is a change of vLLM's rule
    for c in whitespace:
        assert error_of(body(bad_words=["sky", c * 2])) == refused, repr(c)
    assert error_of(body(bad_words=["".join(whitespace)])) == refused
    for word in (" sky", "sky\u00a0", "\u3000sky", "\ufeff", "\x1b"):
        assert (word * 2).lstrip()  # vLLM keeps it
        CONTRACT.validate_completion(body(bad_words=[word * 2]))
