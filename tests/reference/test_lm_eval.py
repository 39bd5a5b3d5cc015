"""lm-eval's local-completions (issue 43) against the reference on real vLLM: its loglikelihood
scores are the gate's own arithmetic on the same requests, its is_greedy the greedy generation,
as far as the batch rule lets a number move (tests/support/lm_eval.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from contract import spec
from tests.support import lm_eval
from tests.support.reference import Reference
from tests.support.upstream import Proxy

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(lm_eval.missing() is not None, reason=str(lm_eval.missing())),
]


def test_lm_eval_scores_the_reference_as_the_gate_does(
    reference: Reference, tmp_path: Path
) -> None:
    effects = spec().batch_effects
    with (
        Proxy(reference.url) as proxy,
        httpx.Client(base_url=reference.url, headers=reference.auth, timeout=120) as client,
    ):
        docs = lm_eval.docs_with_a_greedy_choice(client, reference.served)
        scored = lm_eval.run(proxy.url, reference.key, reference.served, docs, tmp_path)
        held = lm_eval.hold(client, reference.served, scored, proxy.requests)
    assert len(held) == sum(len(d["choices"]) for d in docs)
    lm_eval.assert_held(held, effects["logprob_nats"], effects["near_tie_nats"])
