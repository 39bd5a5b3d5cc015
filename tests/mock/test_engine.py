"""The fake engine on its own: determinism, tokens, logprobs, stops, lens fields."""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import pytest
import zstandard

from api_server.engine import Activations, ChoiceDelta, Event, Usage
from api_server.responses import Assembler, Meta
from contract import spec
from contract.tokens import decode
from mock_server.engine.fake_engine import FakeEngine
from mock_server.engine.vocab import vocab
from tests.support.contract import CONTRACT

MODEL = spec().models[spec().default_model]


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(spec(), [MODEL])


def run(engine: FakeEngine, **fields: Any) -> list[Event]:
    req = CONTRACT.validate_completion(
        {"model": MODEL.name, "prompt": "The sky is", "max_tokens": 24, **fields}
    )
    return list(engine.generate(req, "req_test"))


def completion(engine: FakeEngine, **fields: Any) -> dict[str, Any]:
    req = CONTRACT.validate_completion(
        {"model": MODEL.name, "prompt": "The sky is", "max_tokens": 24, **fields}
    )
    asm = Assembler(req, Meta("cmpl-test", MODEL.name, created=0))
    for event in engine.generate(req, "req_test"):
        asm.feed(event)
    return asm.completion()


def texts(body: dict[str, Any]) -> list[str]:
    return [c["text"] for c in body["choices"]]


# -- determinism ----------------------------------------------------------------------
def test_a_seeded_request_gives_the_same_events_every_time(engine: FakeEngine) -> None:
    fields = {"seed": 7, "logprobs": 3, "temperature": 0.8}
    assert run(engine, **fields) == run(engine, **fields)


def test_temperature_zero_is_deterministic_and_ignores_the_seed(engine: FakeEngine) -> None:
    assert (
        run(engine, temperature=0)
        == run(engine, temperature=0)
        == run(engine, temperature=0, seed=99)
    )


def test_without_a_seed_the_text_varies(engine: FakeEngine) -> None:
    assert texts(completion(engine, ignore_eos=True)) != texts(completion(engine, ignore_eos=True))


def test_different_seeds_give_different_text(engine: FakeEngine) -> None:
    assert texts(completion(engine, seed=1, ignore_eos=True)) != texts(
        completion(engine, seed=2, ignore_eos=True)
    )


def test_a_longer_request_continues_a_shorter_one(engine: FakeEngine) -> None:
    short = completion(engine, seed=5, max_tokens=6, ignore_eos=True)
    long = completion(engine, seed=5, max_tokens=30, ignore_eos=True)
    assert long["choices"][0]["text"].startswith(short["choices"][0]["text"])


def test_the_text_is_the_tokens_decoded_with_the_tokenizer(engine: FakeEngine) -> None:
    body = completion(engine, seed=3, return_token_ids=True, ignore_eos=True, max_tokens=64)
    choice = body["choices"][0]
    # with ignore_eos the end of text is one more token, its text skipped (skip_special_tokens)
    special = spec().special_tokens(MODEL.name)
    assert decode(MODEL, [t for t in choice["token_ids"] if t not in special]) == choice["text"]
    assert all(t < MODEL.vocab_size for t in choice["token_ids"])


# -- logprobs -------------------------------------------------------------------------
def check_logprobs(choice: dict[str, Any], k: int) -> None:
    lp = choice["logprobs"]
    n = len(lp["tokens"])
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    for i in range(n):
        if lp["token_logprobs"][i] is None:
            assert i == 0 and lp["top_logprobs"][i] is None
            continue
        top = lp["top_logprobs"][i]
        values = list(top.values())
        assert values == sorted(values, reverse=True)
        assert top[lp["tokens"][i]] == lp["token_logprobs"][i]
        assert len(top) <= k + 1 and all(v <= 0 for v in values)
        assert sum(math.exp(v) for v in values) <= 1
        assert lp["text_offset"][i] == len("".join(lp["tokens"][:i]))


@pytest.mark.parametrize(
    "k", [0, 1, 5, spec().schema("CompletionRequest")["properties"]["logprobs"]["maximum"]]
)
def test_logprobs_are_consistent_with_the_text(engine: FakeEngine, k: int) -> None:
    body = completion(engine, seed=11, logprobs=k, ignore_eos=True, n=2, max_tokens=40)
    for choice in body["choices"]:
        check_logprobs(choice, k)
        assert "".join(choice["logprobs"]["tokens"]) == choice["text"]


def test_the_sampled_logprob_does_not_depend_on_how_many_are_shown(engine: FakeEngine) -> None:
    one = completion(engine, seed=4, logprobs=1)["choices"][0]["logprobs"]["token_logprobs"]
    many = completion(engine, seed=4, logprobs=10)["choices"][0]["logprobs"]["token_logprobs"]
    assert one == many


def test_at_temperature_zero_the_sampled_token_is_the_likeliest(engine: FakeEngine) -> None:
    lp = completion(engine, temperature=0, logprobs=5)["choices"][0]["logprobs"]
    for token, top in zip(lp["tokens"], lp["top_logprobs"], strict=True):
        assert next(iter(top)) == token


def test_echo_puts_the_prompt_first_with_a_null_first_logprob(engine: FakeEngine) -> None:
    choice = completion(engine, seed=2, echo=True, logprobs=2, prompt="The sky is blue")["choices"][
        0
    ]
    assert choice["text"].startswith("The sky is blue")
    lp = choice["logprobs"]
    prompt_ids = CONTRACT.validate_completion(
        {"model": MODEL.name, "prompt": "The sky is blue"}
    ).prompts[0]
    # Special tokens are written as their text, as vLLM writes them; the text leaves BOS out.
    assert lp["tokens"][: len(prompt_ids)] == [vocab(MODEL).texts[t] for t in prompt_ids]
    assert lp["tokens"][0] == "<|begin_of_text|>" and lp["text_offset"][:2] == [
        0,
        len("<|begin_of_text|>"),
    ]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    check_logprobs(choice, 2)
    assert "".join(lp["tokens"][1:]) == choice["text"]


def test_prompt_logprobs_in_vllms_format(engine: FakeEngine) -> None:
    req = CONTRACT.validate_completion(
        {"model": MODEL.name, "prompt": "The sky is", "max_tokens": 2, "prompt_logprobs": 3}
    )
    choice = completion(engine, prompt_logprobs=3, max_tokens=2)["choices"][0]
    entries = choice["prompt_logprobs"]
    assert len(entries) == len(req.prompts[0]) and entries[0] is None
    for token, entry in zip(req.prompts[0][1:], entries[1:], strict=True):
        assert str(token) in entry and len(entry) <= 4
        for info in entry.values():
            assert set(info) == {"logprob", "rank", "decoded_token"}
            assert info["logprob"] <= 0 and info["rank"] >= 1
        ranks = sorted(info["rank"] for info in entry.values())
        assert len(set(ranks)) == len(ranks)


def test_echo_and_prompt_logprobs_agree(engine: FakeEngine) -> None:
    choice = completion(engine, echo=True, logprobs=1, prompt_logprobs=1, max_tokens=1)["choices"][
        0
    ]
    prompt = choice["prompt_logprobs"]
    for i, entry in enumerate(prompt[1:], start=1):
        assert choice["logprobs"]["token_logprobs"][i] in [v["logprob"] for v in entry.values()]


# -- choices, stops, ends -------------------------------------------------------------
def test_choices_run_over_prompts_first_then_n_and_usage_counts_prompts_once(
    engine: FakeEngine,
) -> None:
    body = completion(
        engine,
        prompt=["a b c", "d"],
        n=3,
        max_tokens=4,
        seed=1,
        temperature=1,
        return_token_ids=True,
    )
    assert [c["index"] for c in body["choices"]] == list(range(6))
    req = CONTRACT.validate_completion(
        {"model": MODEL.name, "prompt": ["a b c", "d"], "max_tokens": 1}
    )
    counts = req.prompt_token_counts
    assert [c["prompt_token_ids"] for c in body["choices"]] == [
        p for p in req.prompts for _ in range(3)
    ]
    generated = sum(len(c["token_ids"]) for c in body["choices"])
    assert body["usage"] == {
        "prompt_tokens": sum(counts),
        "completion_tokens": generated,
        "total_tokens": sum(counts) + generated,
    }


def test_a_stop_string_ends_the_text_before_it(engine: FakeEngine) -> None:
    free = completion(engine, seed=8, ignore_eos=True, max_tokens=40, return_token_ids=True)[
        "choices"
    ][0]
    words = free["text"].split(" ")
    stop = " " + words[6]
    cut = free["text"].index(stop)
    stopped = completion(engine, seed=8, ignore_eos=True, max_tokens=40, stop=[stop])["choices"][0]
    assert (stopped["text"], stopped["finish_reason"], stopped["stop_reason"]) == (
        free["text"][:cut],
        "stop",
        stop,
    )
    kept = completion(
        engine, seed=8, ignore_eos=True, max_tokens=40, stop=stop, include_stop_str_in_output=True
    )["choices"][0]
    assert kept["text"] == free["text"][: cut + len(stop)]


def test_a_stop_token_id_ends_the_choice_with_that_id(engine: FakeEngine) -> None:
    free = completion(engine, seed=9, ignore_eos=True, max_tokens=40, return_token_ids=True)[
        "choices"
    ][0]
    stop_id = free["token_ids"][5]
    choice = completion(
        engine,
        seed=9,
        ignore_eos=True,
        max_tokens=40,
        return_token_ids=True,
        stop_token_ids=[stop_id],
    )["choices"][0]
    ids = choice["token_ids"]
    assert (choice["finish_reason"], choice["stop_reason"], ids[-1]) == ("stop", stop_id, stop_id)
    assert ids[:-1] == free["token_ids"][: len(ids) - 1]


def test_end_of_text_now_and_then_unless_ignore_eos_and_never_before_min_tokens() -> None:
    # the end of text the likeliest token (model.py: the rank nearest the rate), taken greedily
    always = FakeEngine(spec(), [MODEL], eos_rate=1.0)
    choice = completion(always, temperature=0, return_token_ids=True)["choices"][0]
    assert (
        choice["token_ids"],
        choice["text"],
        choice["finish_reason"],
        choice["stop_reason"],
    ) == ([MODEL.eos_token_ids[0]], "", "stop", None)
    # written as its text in logprobs, whatever skip_special_tokens says; text_offset counts it
    eos = spec().special_tokens(MODEL.name)[MODEL.eos_token_ids[0]]
    for skip in (True, False):
        lp = completion(
            always,
            temperature=0,
            ignore_eos=True,
            max_tokens=2,
            allowed_token_ids=[MODEL.eos_token_ids[0]],
            logprobs=1,
            skip_special_tokens=skip,
        )["choices"][0]
        assert (lp["logprobs"]["tokens"], lp["logprobs"]["text_offset"], lp["text"]) == (
            [eos, eos],
            [0, len(eos)],
            "" if skip else eos * 2,
        )
        assert all(eos in top for top in lp["logprobs"]["top_logprobs"])
    choice = completion(always, temperature=0, return_token_ids=True, min_tokens=3)["choices"][0]
    assert len(choice["token_ids"]) == 4 and choice["token_ids"][-1] == MODEL.eos_token_ids[0]
    choice = completion(always, temperature=0, ignore_eos=True, max_tokens=12)["choices"][0]
    assert choice["finish_reason"] == "length"


def test_allowed_token_ids_keep_out_the_end_tokens_they_do_not_name() -> None:
    """vLLM masks every token that allowed_token_ids leaves out, end tokens included."""
    always = FakeEngine(spec(), [MODEL], eos_rate=1.0)
    allowed = [791, 13180]
    choice = completion(
        always, temperature=0, max_tokens=5, allowed_token_ids=allowed, return_token_ids=True
    )["choices"][0]
    assert (choice["finish_reason"], len(choice["token_ids"])) == ("length", 5)
    assert set(choice["token_ids"]) <= set(allowed)
    choice = completion(
        always,
        temperature=0,
        max_tokens=5,
        allowed_token_ids=[*allowed, MODEL.eos_token_ids[0]],
        return_token_ids=True,
    )["choices"][0]
    assert (choice["token_ids"], choice["finish_reason"], choice["stop_reason"]) == (
        [MODEL.eos_token_ids[0]],
        "stop",
        None,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"seed": 3},
        {"temperature": 0},
        {"temperature": 0.7, "seed": 4, "presence_penalty": 1.5, "repetition_penalty": 1.3},
        {"temperature": 0, "frequency_penalty": 2.0, "min_tokens": 3},
    ],
)
def test_a_vocabulary_of_allowed_ids_samples_as_one_token_at_a_time_would(
    engine: FakeEngine, fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55, item 10: allowed_token_ids are read in one numpy pass a token, and choose what
    the rule token by token chooses (each id's rank and log probability, the penalties where
    they apply, vLLM's masking of the end tokens before min_tokens); 100,000 of them answered."""
    import random

    from mock_server.engine.sampler import _Step

    fast = _Step._among_allowed
    compared = []

    def one_at_a_time(step: _Step, key: int, cls: int, u: float, masked: frozenset[int]) -> int:
        m, s = step.model, step.s
        ranks = [(m.rank_of(key, cls, t), t) for t in step.allowed if t not in masked] or [
            (m.rank_of(key, cls, t), t) for t in step.allowed
        ]
        ranks.sort()
        values = [m.logprob(r) - (step.penalty(t, r) if step.penalized else 0) for r, t in ranks]
        if s.greedy:
            return ranks[int(np.argmax(values))][1]
        weights = np.exp((np.asarray(values) - max(values)) / s.cut.temperature)
        cdf = np.cumsum(weights)
        return ranks[min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(ranks) - 1)][1]

    def both(step: _Step, key: int, cls: int, u: Any, masked: frozenset[int]) -> int:
        drawn = u()
        chosen = fast(step, key, cls, lambda: drawn, masked)
        compared.append((chosen, one_at_a_time(step, key, cls, drawn, masked)))
        return chosen

    allowed = random.Random(7).sample(range(MODEL.vocab_size), 100_000)
    body = {"prompt": "The sky is", "max_tokens": 6, "ignore_eos": True, "return_token_ids": True}
    ids = completion(engine, allowed_token_ids=allowed, **body, **fields)["choices"][0]
    assert len(ids["token_ids"]) == 6 and set(ids["token_ids"]) <= set(allowed)
    monkeypatch.setattr(_Step, "_among_allowed", both)
    completion(engine, allowed_token_ids=allowed[:3000], **body, **fields)
    assert len(compared) == 6 and all(a == b for a, b in compared), compared


def test_a_stop_string_waits_until_more_than_min_tokens_tokens_are_out(engine: FakeEngine) -> None:
    """As vLLM's detokenizer: a stop string that every token matches fires on token min_tokens + 1."""
    (token,) = [
        t
        for t in CONTRACT.validate_completion({"model": MODEL.name, "prompt": "a"}).prompts[0]
        if t != MODEL.bos_token_id
    ]
    for min_tokens in (0, 1, 3):
        choice = completion(
            engine,
            prompt="a",
            allowed_token_ids=[token],
            stop=["a"],
            min_tokens=min_tokens,
            max_tokens=6,
            return_token_ids=True,
        )["choices"][0]
        assert (
            choice["token_ids"],
            choice["text"],
            choice["finish_reason"],
            choice["stop_reason"],
        ) == ([token] * (min_tokens + 1), "a" * min_tokens, "stop", "a")


def test_return_token_ids(engine: FakeEngine) -> None:
    req = CONTRACT.validate_completion(
        {"model": MODEL.name, "prompt": "The sky is", "max_tokens": 24}
    )
    body = completion(engine, seed=3, return_token_ids=True)
    choice = body["choices"][0]
    assert choice["prompt_token_ids"] == req.prompts[0]
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"]


def test_allowed_token_ids_and_bad_words(engine: FakeEngine) -> None:
    allowed = [791, 13180, 374]
    choice = completion(
        engine, seed=1, ignore_eos=True, allowed_token_ids=allowed, return_token_ids=True
    )["choices"][0]
    assert set(choice["token_ids"]) <= set(allowed)
    free = completion(engine, seed=1, ignore_eos=True, max_tokens=60)["choices"][0]["text"].split()
    banned = [w for w in free if w.isalpha()][:3]
    text = completion(engine, seed=1, ignore_eos=True, max_tokens=60, bad_words=banned)["choices"][
        0
    ]["text"]
    assert not set(banned) & set(text.replace(",", " ").replace(".", " ").split())


# -- vllm-lens ------------------------------------------------------------------------
def steering(scale: float, fill: float = 0.5, layer: int = 3, **extra: Any) -> list[dict[str, Any]]:
    from contract import encode_tensor

    values = np.full((1, MODEL.hidden_size), fill, dtype=np.float32)
    return [
        {
            "activations": encode_tensor(values, "torch.float32"),
            "layer_indices": [layer],
            "scale": scale,
            **extra,
        }
    ]


def greedy_ids(engine: FakeEngine, **fields: Any) -> list[int]:
    body = completion(engine, temperature=0, ignore_eos=True, return_token_ids=True, **fields)
    return body["choices"][0]["token_ids"]


def test_steering_changes_the_text_deterministically(engine: FakeEngine) -> None:
    plain = greedy_ids(engine)
    steered = greedy_ids(engine, apply_steering_vectors=steering(2.0))
    assert steered != plain
    assert steered == greedy_ids(engine, apply_steering_vectors=steering(2.0))
    # the same addition (values x scale) is the same push
    assert steered == greedy_ids(engine, apply_steering_vectors=steering(4.0, fill=0.25))


def test_a_vector_that_adds_nothing_leaves_the_text_as_without_steering(engine: FakeEngine) -> None:
    plain = greedy_ids(engine)
    assert greedy_ids(engine, apply_steering_vectors=steering(2.0, fill=0.0)) == plain
    assert greedy_ids(engine, apply_steering_vectors=steering(0.0)) == plain
    assert greedy_ids(engine, apply_steering_vectors=steering(0.0, norm_match=True)) == plain


def test_a_stronger_push_replaces_every_token_a_weaker_one_does(engine: FakeEngine) -> None:
    plain = greedy_ids(engine)
    changed = [
        {
            i
            for i, (a, b) in enumerate(
                zip(plain, greedy_ids(engine, apply_steering_vectors=steering(s)), strict=True)
            )
            if a != b
        }
        for s in (0.03, 0.1, 0.5)
    ]
    assert set() < changed[0] < changed[1] < changed[2]


def test_a_vector_at_positions_after_the_prompt_leaves_the_tokens_before_it(
    engine: FakeEngine,
) -> None:
    from contract import encode_tensor

    plain = greedy_ids(engine)
    prompt = len(
        completion(engine, max_tokens=1, return_token_ids=True)["choices"][0]["prompt_token_ids"]
    )
    values = np.full((1, 1, MODEL.hidden_size), 0.5, dtype=np.float32)
    at = prompt + 5  # the position token 6 is written from (its residual reaches tokens 6 on)
    vector = {
        "activations": encode_tensor(values, "torch.float32"),
        "layer_indices": [3],
        "scale": 2.0,
        "position_indices": [at],
    }
    steered = greedy_ids(engine, apply_steering_vectors=[vector])
    assert steered[:6] == plain[:6] and steered[6:] != plain[6:]


def decode_tensor(wire: dict[str, Any]) -> np.ndarray:
    raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(wire["data"]))
    return np.frombuffer(raw, dtype=np.dtype(wire["dtype"]).newbyteorder("<")).reshape(
        wire["shape"]
    )


def test_activations_have_the_declared_shape_and_encoding(engine: FakeEngine) -> None:
    layers = [0, 5, MODEL.num_layers - 1]
    events = run(engine, seed=1, output_residual_stream=layers, max_tokens=10)
    usage = next(e for e in events if isinstance(e, Usage))
    acts = events[-1]
    assert isinstance(acts, Activations) and acts.layers == layers
    wire = acts.residual_stream
    positions = usage.prompt_tokens + usage.completion_tokens - 1
    assert (wire["dtype"], wire["original_dtype"], wire["compression"]) == (
        "int16",
        "torch.bfloat16",
        "zstd",
    )
    assert wire["shape"] == [len(layers), positions, MODEL.hidden_size]
    values = decode_tensor(wire)
    as_float = (values.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(as_float).all() and as_float.std() > 0
    assert events == run(engine, seed=1, output_residual_stream=layers, max_tokens=10)


def test_activation_layers_are_ascending_and_rows_follow_them(engine: FakeEngine) -> None:
    """Like vllm-lens: whatever the request's order, layers come back ascending, and row i
    of the residual stream is layer layers[i] (the same values as a capture of that layer alone)."""
    asked = [MODEL.num_layers - 1, 0, 5]
    acts = run(engine, seed=1, output_residual_stream=asked, max_tokens=4)[-1]
    assert isinstance(acts, Activations) and acts.layers == sorted(asked)
    rows = decode_tensor(acts.residual_stream)
    for i, layer in enumerate(acts.layers):
        alone = run(engine, seed=1, output_residual_stream=[layer], max_tokens=4)[-1]
        assert np.array_equal(rows[i], decode_tensor(alone.residual_stream)[0]), layer
    ordered = run(engine, seed=1, output_residual_stream=sorted(asked), max_tokens=4)[-1]
    assert acts.residual_stream == ordered.residual_stream


def test_a_whole_capture_is_built(engine: FakeEngine) -> None:
    """The largest capture the caps allow (one layer, every position) comes back whole."""
    prompt_len = 4
    max_tokens = MODEL.capture_cap - prompt_len + 1
    events = run(
        engine,
        prompt=[MODEL.bos_token_id, 1, 2, 3],
        max_tokens=max_tokens,
        ignore_eos=True,
        output_residual_stream=[1],
    )
    assert events[-1].residual_stream["shape"] == [1, MODEL.capture_cap, MODEL.hidden_size]


def test_every_choice_ends_once_and_last(engine: FakeEngine) -> None:
    events = run(engine, seed=3, n=4, temperature=1, max_tokens=12)
    deltas = [e for e in events if isinstance(e, ChoiceDelta)]
    for index in range(4):
        mine = [d for d in deltas if d.index == index]
        assert [d.finish_reason is not None for d in mine] == [False] * (len(mine) - 1) + [True]


def test_the_specs_special_tokens_are_the_tokenizers() -> None:
    special = spec().special_tokens(MODEL.name)
    assert set(special) == {MODEL.bos_token_id, *MODEL.eos_token_ids}
    assert {i: vocab(MODEL).texts[i] for i in special} == special
