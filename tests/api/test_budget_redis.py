"""The Budget in Redis, against a real redis-server: the store's arithmetic (the same as
SQLite's and the core's), keys kept as hashes, two mock replicas spending one Budget,
failing closed while Redis is down and recovering after, and the conformance suite
against two replicas. Without redis-server these tests skip themselves (tests/support/redis_server.py)."""

from __future__ import annotations

import io
import json
import logging
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from rich.console import Console

from api_server.budget import REDIS_SCHEMES, Budget, key_id, open_budget
from api_server.budget.redis import PREFIX, RedisBudget
from api_server.budget.sqlite import FILE_NAME, BudgetStore
from api_server.config import ServerConfig
from conformance.cli.main import main
from contract import ApiError, InferenceUnavailable, hold, spec
from gallery.support import PACED
from tests.support.contract import CONTRACT
from tests.support.mock import MockProcess, RoundRobin, completion_body, free_port, parse_sse
from tests.support.redis_server import RedisServer

KEY = "redis-test-key"
BODY = completion_body(max_tokens=40)
REQ = CONTRACT.validate_completion(BODY)
HOLD = hold(REQ.prompt_token_counts, REQ.n, REQ.max_tokens, None).amount
UNAVAILABLE = spec().error_codes["inference_unavailable"]
QUOTA = spec().error_codes["insufficient_quota"]
CLAMPED = "x-acs-max-tokens-clamped"


@pytest.fixture(params=["sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """`make_store(initial)`: a store of each backend, chosen as a server chooses it."""
    url = None
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        redis.Redis.from_url(server.url).flushdb()
        url = server.url
    yield lambda initial: open_budget(
        ServerConfig(budget_tokens=initial, budget_dir=str(tmp_path), budget_url=url)
    )


# -- the store ---------------------------------------------------------------------------
def test_open_budget_picks_the_backend_by_url(redis_server: RedisServer, tmp_path: Path) -> None:
    assert isinstance(
        open_budget(ServerConfig(budget_tokens=1, budget_dir=str(tmp_path))), BudgetStore
    )
    assert isinstance(
        open_budget(ServerConfig(budget_tokens=1, budget_url=redis_server.url)), RedisBudget
    )
    with pytest.raises(ValueError) as refused:
        open_budget(
            ServerConfig(budget_tokens=1, budget_url="http://u:pw-0123456789@127.0.0.1:6379")
        )
    schemes = ", ".join(s + "..." for s in REDIS_SCHEMES)
    assert (
        str(refused.value) == f"budget_url: expected {schemes}, not 'http://u:***@127.0.0.1:6379'"
    )


def test_reserve_clamps_settle_refunds(make_store: Any) -> None:
    initial = 2 * HOLD + sum(REQ.prompt_token_counts) + 3
    store = make_store(initial)
    first = store.reserve(KEY, REQ)
    assert (first.amount, first.clamped, first.max_tokens) == (HOLD, False, REQ.max_tokens)
    store.settle(KEY, first, used=10)
    assert store.remaining(KEY) == initial - 10
    second = store.reserve(KEY, REQ)
    left = initial - 10 - HOLD
    third = store.reserve(KEY, REQ)  # what is left: clamped
    assert (second.clamped, third) == (
        False,
        hold(REQ.prompt_token_counts, REQ.n, REQ.max_tokens, left),
    )
    assert third.clamped and third.amount == left and store.remaining(KEY) == 0
    with pytest.raises(ApiError) as refused:
        store.reserve(KEY, REQ)
    with pytest.raises(ApiError) as core:
        hold(REQ.prompt_token_counts, REQ.n, REQ.max_tokens, 0)
    assert CONTRACT.errors.body(refused.value, "r") == CONTRACT.errors.body(core.value, "r")
    assert store.remaining(KEY) == 0 and store.remaining("someone-else") == initial


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "The sky is", "max_tokens": 7},
        {"prompt": ["a b c", "d"], "n": 3, "max_tokens": 5},
        {"prompt": [[1, 2, 3, 4, 5, 6, 7, 8]], "n": 2, "max_tokens": 9},
    ],
    ids=["one", "two-prompts-n3", "ids-n2"],
)
def test_the_script_takes_what_the_cores_hold_takes(
    redis_server: RedisServer, body: dict[str, Any]
) -> None:
    """Every remaining amount around the request's size: the Lua script and contract.hold agree."""
    req = CONTRACT.validate_completion(completion_body(**body))
    store = RedisBudget(redis_server.url, 0)
    full = hold(req.prompt_token_counts, req.n, req.max_tokens, None).amount
    for before in range(full + 3):
        store.set_remaining(KEY, before)
        try:
            expected = hold(req.prompt_token_counts, req.n, req.max_tokens, before)
        except ApiError as error:
            with pytest.raises(ApiError) as refused:
                store.reserve(KEY, req)
            assert CONTRACT.errors.body(refused.value, "r") == CONTRACT.errors.body(error, "r")
            assert store.remaining(KEY) == before
            continue
        assert store.reserve(KEY, req) == expected
        assert store.remaining(KEY) == before - expected.amount


def test_stores_keep_a_hash_of_the_key_never_the_key(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    RedisBudget(redis_server.url, 1000).reserve(KEY, REQ)
    assert client.keys("*") == [(PREFIX + key_id(KEY)).encode()]
    BudgetStore(tmp_path, 1000).reserve(KEY, REQ)
    rows = sqlite3.connect(tmp_path / FILE_NAME).execute("SELECT key FROM budget").fetchall()
    assert rows == [(key_id(KEY),)]
    assert (
        KEY.encode()
        not in (tmp_path / FILE_NAME).read_bytes() + (tmp_path / (FILE_NAME + "-wal")).read_bytes()
    )


def test_unreachable_redis_is_503_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    # nothing listens there; its passwords (userinfo, and the query redis-py also reads) never logged
    secrets = ("userinfo-PASS-0123456789", "query-PASS-9876543210")
    url = f"redis://u:{secrets[0]}@127.0.0.1:{free_port()}/0?password={secrets[1]}&db=0"
    store: Budget = RedisBudget(url, 1000)
    caplog.set_level(logging.WARNING, logger="api_server")
    for _ in range(3):
        with pytest.raises(ApiError) as refused:
            store.reserve(KEY, REQ)
        assert CONTRACT.errors.body(refused.value, "r") == CONTRACT.errors.body(
            InferenceUnavailable.from_template("inference_unavailable"), "r"
        )
    store.settle(KEY, hold([1], 1, 1, None), used=1)  # a lost settlement is logged, not raised
    errors = [r.getMessage() for r in caplog.records if "is unreachable" in r.getMessage()]
    assert len(errors) == 1 and "completions get 503 inference_unavailable" in errors[0]
    assert any("a settlement was lost" in r.getMessage() for r in caplog.records)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "redis://u:***@127.0.0.1:" in logged and "/0?password=***&db=***" in logged
    assert not [s for s in secrets if s in logged]


# -- two replicas, one Redis ---------------------------------------------------------------
CLIENTS = 64
KEYS = tuple(f"replica-key-{i}" for i in range(4))
PER_KEY = CLIENTS // len(KEYS)
# Per key: half its requests fit whole, then one is clamped; the rest wait for refunds or get 429.
INITIAL = (PER_KEY // 2) * HOLD + sum(REQ.prompt_token_counts) + 3


def replica(url: str, *args: str) -> MockProcess:
    return MockProcess(
        "--workers", "2", "--threads", "16", "--budget-url", url, *PACED, *args
    ).start()


def send(
    url: str, i: int, key: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    """Alternately streamed and not; half ignore EOS (they use their whole Hold).
    Returns the status, the headers and the usage (200) or the error body."""
    body = {**BODY, "ignore_eos": i % 2 == 0, "seed": i}
    if i % 4 < 2:
        body.update(stream=True, stream_options={"include_usage": True})
    r = httpx.post(
        url + "/v1/completions",
        json=body,
        timeout=120,
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
    )
    if r.status_code != 200:
        return r.status_code, dict(r.headers), r.json()
    if body.get("stream"):
        events = parse_sse(r.text).events
        usage = next(
            e["usage"]
            for e in events
            if isinstance(e, dict) and e.get("usage") and not e["choices"]
        )
        return 200, dict(r.headers), usage
    return 200, dict(r.headers), r.json()["usage"]


def test_two_replicas_share_one_budget(redis_server: RedisServer) -> None:
    redis.Redis.from_url(redis_server.url).flushdb()
    replicas = [
        replica(redis_server.url, "--budget-tokens", str(INITIAL), "--keys", ",".join(KEYS))
        for _ in range(2)
    ]
    try:
        jobs = [(replicas[i % 2].url, i, KEYS[i % len(KEYS)]) for i in range(CLIENTS)]
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(lambda job: (job[2], *send(*job)), jobs))
    finally:
        logs = [r.log() for r in replicas]
        for r in replicas:
            r.close()
    spent: dict[str, int] = defaultdict(int)
    for key, status, headers, body in results:
        if status == 200:
            assert body["completion_tokens"] <= int(headers.get(CLAMPED, REQ.max_tokens))
            spent[key] += body["total_tokens"]
        else:
            assert (status, body["error"]["code"]) == (QUOTA["status"], "insufficient_quota"), (
                body,
                logs,
            )
    refused_or_clamped = [k for k, s, h, _ in results if s != 200 or CLAMPED in h]
    assert set(refused_or_clamped) == set(KEYS)  # every key's Budget ran short
    store = RedisBudget(redis_server.url, INITIAL)
    assert {k: store.remaining(k) for k in KEYS} == {k: INITIAL - spent[k] for k in KEYS}
    assert all(spent[k] <= INITIAL for k in KEYS)


def unavailable_body(reply: httpx.Response) -> dict[str, Any]:
    body = reply.json()
    assert re.fullmatch(
        spec().schema("ErrorBody")["properties"]["request_id"]["pattern"],
        body.get("request_id", ""),
    ), body
    assert reply.headers["x-request-id"] == body["request_id"]
    return {**body, "request_id": "r"}


def test_redis_down_is_503_then_recovers_after_a_restart(tmp_path: Path) -> None:
    server = RedisServer().start()
    mock = replica(server.url, "--budget-tokens", "100000", "--keys", KEY)
    store = RedisBudget(server.url, 100000)
    try:
        # Mid-run: eight requests hold their Budget and wait (simulated TTFT) when Redis dies.
        with ThreadPoolExecutor(8) as pool:
            slow = [
                pool.submit(send, mock.url, i, KEY, {"X-Mock-Ttft-Ms": "5000"}) for i in range(8)
            ]
            deadline = time.monotonic() + 120  # a guard against hanging, not a speed limit
            while store.remaining(KEY) > 100000 - 8 * HOLD:
                assert time.monotonic() < deadline, mock.log()
                time.sleep(0.02)
            server.kill()
            down = [
                httpx.post(
                    mock.url + "/v1/completions",
                    json={**BODY, "stream": i % 2 == 0},
                    timeout=60,
                    headers={"Authorization": f"Bearer {KEY}"},
                )
                for i in range(6)
            ]
            in_flight = [f.result() for f in slow]
        expected = CONTRACT.errors.body(
            InferenceUnavailable.from_template("inference_unavailable"), "r"
        )
        assert [(r.status_code, unavailable_body(r)) for r in down] == [
            (UNAVAILABLE["status"], expected)
        ] * 6
        assert [status for status, _, _ in in_flight] == [200] * 8  # held before: they finish
        server.start()  # same port, same data
        after_restart = store.remaining(KEY)
        assert after_restart == 100000 - 8 * HOLD  # their settlements were lost: no refund
        back = [send(mock.url, i, KEY) for i in range(6)]
        assert [status for status, _, _ in back] == [200] * 6
        assert store.remaining(KEY) == after_restart - sum(
            usage["total_tokens"] for _, _, usage in back
        )
        log = mock.log()
        assert 1 <= log.count("is unreachable") <= 2, log  # once per worker, not per request
        assert "is reachable again" in log and "a settlement was lost" in log, log
    finally:
        mock.close()
        server.close()


# -- the conformance suite against two replicas ----------------------------------------------
def test_full_profile_against_two_replicas_sharing_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_server.url).flushdb()
    initial = 1_000_000
    RedisBudget(redis_server.url, initial).set_remaining("spent", 0)
    replicas = [replica(redis_server.url, "--budget-tokens", str(initial)) for _ in range(2)]
    transport = RoundRobin([r.url for r in replicas])
    try:
        out = io.StringIO()
        code = main(
            [
                "--base-url",
                replicas[0].url,
                "--api-key",
                KEY,
                "--profile",
                "full",
                "--no-progress",
                "--exhausted-key",
                "spent",
                "--json",
                str(tmp_path / "report.json"),
            ],
            transport=transport,
            console=Console(file=out, width=200),
        )
    finally:
        for r in replicas:
            r.close()
    assert code == 0, out.getvalue()
    outcomes = {
        r["id"]: r["outcome"] for r in json.loads((tmp_path / "report.json").read_text())["results"]
    }
    assert outcomes["budget:exhausted_key"] == "passed"
    assert min(transport.sent.values()) > 100 and len(transport.sent) == 2  # both replicas answered
    assert (
        RedisBudget(redis_server.url, initial).remaining(KEY) < initial
    )  # and spent from the shared Budget
