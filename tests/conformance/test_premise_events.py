"""premise:max_tokens counts the events that carry a token, text or not. A token can show no
text (vLLM writes an end token under ignore_eos as ""); the meter counts such a chunk as nothing
(it must not charge a bare finish chunk), and a server past max_tokens whose third event was one
passed the premise: test_peers' "max_tokens x4" mock did, now and then, when it drew its end
token early."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.checks.premise import MAX_TOKENS
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome
from conformance.engine.runner import run
from contract import spec
from gallery.answers import ScriptedStream
from tests.support.mock import KEY

MODEL = spec().default_model


def _premise(chunks: list[tuple[str, str | None]]) -> Any:
    config = RunConfig(
        base_url="http://scripted.test",
        api_key=KEY,
        model=MODEL,
        profile="full",
        select=("premise:max_tokens",),
    ).validate()
    report = run(
        config, select(REGISTRY, config), transport=httpx.WSGITransport(app=ScriptedStream(chunks))
    )
    return next(r for r in report.results if r.id == "premise:max_tokens")


@pytest.mark.parametrize(
    "chunks",
    [
        [(" a", None), ("", None), (" b", None), (" c", None)],  # an end token's "" second
        [("", None), ("", None), ("", None), (" d", "length")],  # three tokens without text
    ],
)
def test_a_stream_past_max_tokens_fails_whatever_its_tokens_text(chunks: list[Any]) -> None:
    result = _premise(chunks)
    assert result.outcome is Outcome.FAILED
    assert result.findings[0].message.startswith(
        f"the server wrote {MAX_TOKENS + 1} tokens for max_tokens {MAX_TOKENS}"
    )


@pytest.mark.parametrize(
    "chunks",
    [
        [(" a", None), (" b", "length")],  # vLLM: the last token carries the finish
        [(" a", None), (" b", None), ("", "length")],  # llama.cpp: a bare finish chunk after
        [(" a", None), ("", "length")],  # a token whose text is held back, then the finish
    ],
)
def test_a_stream_within_max_tokens_passes_a_bare_finish_chunk_being_no_token(
    chunks: list[Any],
) -> None:
    assert _premise(chunks).outcome is Outcome.PASSED
