"""The slack re-tokenizing needs (issue 63, item 2): the gate counts a plain answer's text with the
model's tokenizer, and only text past its price by meter.slack is evidence of a server that ran
past max_tokens. Held on the mock's generations at temperature 2 (tokens at random: the most
seams that re-tokenize otherwise), where the generated ids are known: no honest answer goes past
its price by more than the slack, and one a few tokens past max_tokens does, by the gate's
count alone."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from conformance.engine.runner import text_tokens
from conformance.wire import meter
from conformance.wire.ledger import Ledger
from conformance.wire.token_cost import CostModel
from contract import spec
from mock_server.testing import URL, transport

API = spec()
MODEL = API.models[API.default_model]
SAMPLES = 40  # seeded samples a length


@pytest.mark.parametrize("max_tokens", [4, 16, 64])
def test_an_honest_answers_text_stays_within_the_slack_of_its_price(max_tokens: int) -> None:
    excess = []
    with httpx.Client(transport=transport(), base_url=URL, timeout=60) as client:
        for seed in range(SAMPLES):
            body = {
                "model": API.default_model,
                "prompt": f"Story {seed}:",
                "max_tokens": max_tokens,
                "seed": seed,
                "temperature": 2.0,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            choice = client.post(
                API.completions_path, json=body, headers={"Authorization": "Bearer k"}
            ).json()["choices"][0]
            assert len(choice["token_ids"]) == max_tokens
            excess.append(text_tokens(MODEL, choice["text"]) - max_tokens)
    assert max(excess) <= meter.slack(max_tokens), excess


def test_a_text_past_max_tokens_by_more_than_the_slack_is_counted_past_its_price() -> None:
    """A plain answer that ran on: its text's tokens, past price + slack, are charged and shown."""
    words = " the sky was green over a quiet harbour" * 12
    count = text_tokens(MODEL, words)
    metered = meter.answer(
        {"choices": [{"index": 0, "text": words}]},
        {"max_tokens": 16},
        16,
        16,
        lambda text: text_tokens(MODEL, text),
    )
    assert count > 16 + meter.slack(16)
    assert (metered.tokens, metered.read, metered.exact) == (count, count, None)


# Real vLLM 0.32 (the reference, the tiny model) answered this prompt of token ids, whose last id
# is a lone byte (0xAF), max_tokens 4, with 4 token ids and a text that begins with the prompt's
# own text: its detokenizer writes a prompt that ends inside a character before the first token.
LONE_BYTE_PROMPT = [790, 32676, 128254, 9, 300, 1082, 10137, 275, 5501, 107]
LEAKED_TEXT = "STalone*asise promptitCore\ufffd\u0627\u0626 mlad\uc120\uc744 Loft"


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.cost = CostModel.of(API, MODEL.max_model_len)
    ledger.count_text = lambda text: text_tokens(MODEL, text)
    return ledger


# the body schemathesis drew in CI: ids written as JSON numbers with a fraction of 0 (integers)
DRAWN = [790.0, 32676.0, 128254, 9.0, 300.0, 1082, 10137, 275.0, 5501.0, 107.0]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("prompt", [LONE_BYTE_PROMPT, DRAWN, [LONE_BYTE_PROMPT]])
def test_a_prompt_of_ids_written_back_into_the_text_is_charged_and_no_finding(
    prompt: list[Any], n: int
) -> None:
    """A schemathesis body drawn in CI (seed 465266186) got this answer from the reference: the
    gate re-tokenized 13 tokens for a request priced at 4 and called it past max_tokens. The text
    is charged as read; the prompt's own ids, once a choice, are no evidence."""
    body = {"model": API.default_model, "prompt": prompt, "max_tokens": 4.0, "n": n}
    answer = {"choices": [{"index": i, "text": LEAKED_TEXT} for i in range(n)]}
    ledger = _ledger()
    read = text_tokens(MODEL, LEAKED_TEXT)
    assert read > 4 + meter.slack(4)  # past the slack: the finding the prompt's text made
    ledger.count(answer, json.dumps(body).encode(), 4 * n, None)
    assert (ledger.tokens, ledger.overspends) == (read * n, [])


def test_the_same_text_for_a_prompt_of_text_is_past_its_price() -> None:
    """A text prompt is whole characters: none of it comes back, so the same text is evidence."""
    body = {"model": API.default_model, "prompt": "STalone", "max_tokens": 4}
    ledger = _ledger()
    read = text_tokens(MODEL, LEAKED_TEXT)
    ledger.count(
        {"choices": [{"index": 0, "text": LEAKED_TEXT}]}, json.dumps(body).encode(), 4, None
    )
    assert [(o.priced, o.spent) for o in ledger.overspends] == [(4, read)]
