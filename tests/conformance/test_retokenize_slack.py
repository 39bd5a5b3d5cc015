"""The slack re-tokenizing needs (issue 63, item 2): the gate counts a plain answer's text with the
model's tokenizer, and only text past its price by meter.slack is evidence of a server that ran
past max_tokens. Held on the mock's generations at temperature 2 (tokens at random: the most
seams that re-tokenize otherwise), where the generated ids are known: no honest answer goes past
its price by more than the slack, and one a few tokens past max_tokens does, by the gate's
count alone."""

from __future__ import annotations

import httpx
import pytest

from conformance.engine.runner import text_tokens
from conformance.wire import meter
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
