"""lm-eval's local-completions (issue 43): a real harness's loglikelihood scores against the mock
are the gate's own arithmetic on the same requests, and its is_greedy the mock's greedy
generation, to the bit (tests/support/lm_eval.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from contract import spec
from mock_server import MockConfig, create_app
from tests.support import lm_eval
from tests.support.upstream import Proxy
from tests.support.wsgi import serve

pytestmark = pytest.mark.skipif(lm_eval.missing() is not None, reason=str(lm_eval.missing()))
MODEL = spec().default_model
KEY = "sk-lm-eval-test"


def test_lm_eval_scores_the_mock_as_the_gate_does(tmp_path: Path) -> None:
    with (
        serve(create_app(MockConfig())) as url,
        Proxy(url) as proxy,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as client,
    ):
        docs = lm_eval.docs_with_a_greedy_choice(client, MODEL)
        scored = lm_eval.run(proxy.url, KEY, MODEL, docs, tmp_path)
        held = lm_eval.hold(client, MODEL, scored, proxy.requests)
    assert len(held) == sum(len(d["choices"]) for d in docs)
    lm_eval.assert_held(held)
