"""The Budget: the Hold's arithmetic, and no double spend or lost update under
concurrent requests across two gunicorn worker processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server.budget.sqlite import BudgetStore
from contract import ApiError, hold, spec
from tests.support.contract import CONTRACT
from tests.support.mock import KEY, MockProcess, completion_body, parse_sse

BODY = completion_body(max_tokens=40)
REQ = CONTRACT.validate_completion(BODY)
HOLD = hold(REQ.prompt_token_counts, REQ.n, REQ.max_tokens, None).amount
THREADS = 32
QUOTA_STATUS = spec().error_codes["insufficient_quota"]["status"]
# Half the requests fit whole; then one is clamped; the rest must wait for refunds or get 429.
INITIAL = (THREADS // 2) * HOLD + sum(REQ.prompt_token_counts) + 3


def test_reserve_clamps_settle_refunds(tmp_path: Path) -> None:
    store = BudgetStore(tmp_path, INITIAL)
    held = store.reserve(KEY, REQ)
    assert (held.amount, held.clamped) == (HOLD, False)
    assert store.remaining(KEY) == INITIAL - HOLD
    store.settle(KEY, held, used=10)
    assert store.remaining(KEY) == INITIAL - 10
    assert store.remaining("someone-else") == INITIAL


def test_429_is_the_cores_error(tmp_path: Path) -> None:
    store = BudgetStore(tmp_path, 1)
    with pytest.raises(ApiError) as info:
        store.reserve(KEY, REQ)
    with pytest.raises(ApiError) as core:
        hold(REQ.prompt_token_counts, REQ.n, REQ.max_tokens, 1)
    assert CONTRACT.errors.body(info.value, "r") == CONTRACT.errors.body(core.value, "r")
    assert store.remaining(KEY) == 1  # a refused Hold takes nothing


def test_threads_in_one_process(tmp_path: Path) -> None:
    store = BudgetStore(tmp_path, INITIAL)

    def one(_: int) -> int:
        try:
            held = store.reserve(KEY, REQ)
        except ApiError:
            return 0
        store.settle(KEY, held, held.amount - 1)
        return held.amount - 1

    with ThreadPoolExecutor(THREADS) as pool:
        used = sum(pool.map(one, range(THREADS * 2)))
    assert store.remaining(KEY) == INITIAL - used


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockProcess, Path]]:
    directory = tmp_path_factory.mktemp("budget")
    server = MockProcess(
        "--workers",
        "2",
        "--threads",
        "16",
        "--budget-tokens",
        str(INITIAL),
        "--budget-dir",
        str(directory),
        "--keys",
        KEY,
    ).start()
    yield server, directory
    server.close()


def request(url: str, i: int) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Alternately streamed and not; half ignore EOS (they use their whole Hold)."""
    body = {**BODY, "ignore_eos": i % 2 == 0, "seed": i}
    if i % 4 < 2:
        body.update(stream=True, stream_options={"include_usage": True})
    with httpx.Client(timeout=60) as client:
        r = client.post(
            url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        )
    if r.status_code == 200 and body.get("stream"):
        events = parse_sse(r.text).events
        usage = next(
            e["usage"]
            for e in events
            if isinstance(e, dict) and e.get("usage") and not e["choices"]
        )
        return 200, dict(r.headers), {"usage": usage}
    return r.status_code, dict(r.headers), r.json()


def test_concurrent_requests_across_workers(budget_server: tuple[MockProcess, Path]) -> None:
    server, directory = budget_server
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda i: request(server.url, i), range(THREADS)))
    spent = 0
    statuses = []
    for status, headers, body in results:
        statuses.append(status)
        if status == 200:
            usage = body["usage"]
            clamped = headers.get("x-acs-max-tokens-clamped")
            assert usage["completion_tokens"] <= int(clamped or REQ.max_tokens)
            spent += usage["total_tokens"]
        else:
            assert status == QUOTA_STATUS and body["error"]["code"] == "insufficient_quota", (
                json.dumps(body)
            )
    assert QUOTA_STATUS in statuses or any("x-acs-max-tokens-clamped" in h for _, h, _ in results)
    assert 0 <= BudgetStore(directory, INITIAL).remaining(KEY) == INITIAL - spent
