"""The meter charges every check at least what the server generated for it (issue 63: the ceiling
holds by what the server generated), held check by check against the mock's own count,
`vllm:generation_tokens_total`, which counts each token as it leaves the engine.

The mock here is unpaced: it writes the whole of a stream before it sees its client go, as a
fast server does. A check that closed an accepted stream after its first event (charged at most
CHEAP_TOKENS) made it generate all the request allowed (215 tokens for `golden:caps.generated.at`);
an end token or a stop string that shows no text in a stream is charged too."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import Check, select
from conformance.engine.results import CheckResult
from conformance.engine.runner import run
from conformance.wire.ledger import CHEAP_TOKENS, Ledger
from conformance.wire.sse import parse_lines
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.metrics import samples
from tests.support.suite import KEY
from tests.support.wsgi import serve

GENERATED = "vllm:generation_tokens_total"


def _generated(url: str) -> float:
    """The mock's own count of generated tokens, every model's."""
    scrape = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(v for (name, _), v in samples(scrape).items() if name == GENERATED)


@pytest.mark.parametrize("seed", [1, 7])
def test_every_check_is_charged_at_least_what_the_mock_generated_for_it(seed: int) -> None:
    per_check: dict[str, tuple[float, int]] = {}
    with serve(create_app(MockConfig())) as url:
        before: dict[str, float] = {}

        def progress(check: Check, result: CheckResult | None) -> None:
            if result is None:
                before[check.id] = _generated(url)
            else:
                per_check[check.id] = (_generated(url) - before[check.id], result.tokens)

        config = RunConfig(
            url,
            KEY,
            profile="full",
            seed=seed,
            timeout=5,
            # werkzeug's server, not the API's: robust: holds gunicorn's (test_robust_discrimination)
            exclude=("robust:*", "stream:keepalive"),
        )
        report = run(config, select(REGISTRY, config), progress=progress)
    assert not report.errors and not report.failed, [(r.id, r.reason) for r in report.failed]
    under = {cid: got for cid, got in per_check.items() if got[0] > got[1]}
    assert not under, under  # (the mock's count, the meter's charge)
    generated = sum(g for g, _ in per_check.values())
    assert generated > 20 * CHEAP_TOKENS  # the run generated: the comparison above could fail
    assert report.tokens >= generated


def _charged(events: list[dict[str, Any]], body: dict[str, Any]) -> int:
    """What the ledger charges a stream of these chunks, read whole, for this request."""
    ledger = Ledger()
    datas = [f"data: {json.dumps(e)}" for e in events] + ["data: [DONE]"]
    lines = [(0.0, line) for data in datas for line in (data, "")]
    ledger.count_stream(parse_lines(lines), json.dumps(body).encode(), 0, None)
    return ledger.tokens


def _chunk(text: str, finish: str | None, index: int = 0) -> dict[str, Any]:
    return {"choices": [{"index": index, "text": text, "finish_reason": finish}]}


def test_a_stream_choice_ended_by_stop_is_charged_the_token_that_shows_no_text() -> None:
    body = {"model": "m", "prompt": "p", "max_tokens": 8, "n": 2, "stream": True}
    two_words = [_chunk(" a", None), _chunk(" b", None)]
    assert _charged([*two_words, _chunk("", "length")], body) == 2
    assert _charged([*two_words, _chunk("", "stop")], body) == 3  # its end token
    assert _charged([*two_words, _chunk(" c", "stop")], body) == 4  # a stop string's last token
    both = [
        _chunk(" a", None, 0),
        _chunk("", "stop", 0),
        _chunk(" b", None, 1),
        _chunk("", "stop", 1),
    ]
    assert _charged(both, body) == 4
