"""The mock in a client's own tests, fourth pass (issue 66): keys matched whole, a quick stop,
the mock's headers meaning the same live, in process and replayed, replayed answers counted,
cassettes' times bounded and cut lines survived, honest params and messages, no temp file left,
a gateway's faults in front of the API."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server.config import ConfigError
from api_server.serve import DEFAULT_GRACEFUL_TIMEOUT
from contract import spec
from mock_server import MockConfig, create_app
from mock_server.cassettes.cassette import Recorder, Replayer
from mock_server.testing import URL, live_mock, transport
from tests.support.wsgi import Environ, RecordsHeaders, StartResponse, serve

API = spec()
COMPLETIONS = API.completions_path
KEY = "sk-live-key"
BODY = {"model": API.default_model, "prompt": "The sky is", "max_tokens": 4, "seed": 3}
STREAM = {**BODY, "stream": True}
MESSAGES = API.messages


def post(client: httpx.Client, body: Any, **headers: str) -> httpx.Response:
    return client.post(
        COMPLETIONS,
        content=json.dumps(body),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **headers},
    )


def error_of(reply: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = reply.json()["error"]
    return error


# -- keys -------------------------------------------------------------------------------------


def test_a_keys_string_is_read_as_keys_reads_it_never_matched_as_a_substring() -> None:
    with httpx.Client(transport=transport(keys="sk-live-key,other-key"), base_url=URL) as c:
        assert post(c, BODY).status_code == 200
        for piece in ("live", "sk-", "k", "sk-live-key,other-key"):
            reply = c.post(COMPLETIONS, json=BODY, headers={"Authorization": f"Bearer {piece}"})
            assert (reply.status_code, error_of(reply)["code"]) == (401, "invalid_api_key")
    assert MockConfig(keys="a, b").keys == ("a", "b")
    assert MockConfig(keys=["a", "b"]).keys == ("a", "b")
    with pytest.raises(ConfigError, match="must be keys"):
        MockConfig(keys=["a", 1])  # type: ignore[list-item]


# -- a quick stop -------------------------------------------------------------------------------


def test_live_mock_stops_without_waiting_for_a_clients_idle_connection() -> None:
    """A session-scoped client leaves its keep-alive connection open; the mock's stop does not
    wait the graceful timeout for it (the bound: half of that timeout, whatever the machine)."""
    with httpx.Client(timeout=30) as client:
        with live_mock() as mock:
            assert client.get(mock.url + "/health").status_code == 200
            began = time.monotonic()
        stopped = time.monotonic() - began
        assert mock.process.returncode is not None
    assert stopped < DEFAULT_GRACEFUL_TIMEOUT / 2, stopped


# -- no temp file left ----------------------------------------------------------------------------


def test_an_in_process_budget_leaves_no_file_after_the_process_exits(tmp_path: Path) -> None:
    script = (
        "from api_server.state import state_of\n"
        "from mock_server.testing import transport\n"
        "t = transport(budget_tokens=100)\n"
        "print(state_of(t.app).budget.path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    path = Path(done.stdout.strip())
    assert path.name == "budget.sqlite3"
    assert not path.parent.exists()


# -- honest params and messages ------------------------------------------------------------------


def test_a_prompt_that_alone_fills_the_context_names_the_prompt_whatever_max_tokens() -> None:
    length = API.models[API.default_model].max_model_len
    body = {"model": API.default_model, "prompt": [791] * (length + 2), "max_tokens": 2}
    with httpx.Client(transport=transport(), base_url=URL) as c:
        error = error_of(post(c, body))
    assert (error["code"], error["param"]) == ("context_length_exceeded", "prompt")
    assert error["message"] == API.token_rules["prompt_too_long"]["message"].format(
        max_model_len=length, prompt_tokens=length + 2
    )


def test_a_gzip_body_is_told_its_coding_not_that_it_is_broken_json() -> None:
    with httpx.Client(transport=transport(), base_url=URL) as c:
        reply = post(c, BODY, **{"Content-Encoding": "gzip"})
    assert reply.status_code == 415
    assert error_of(reply)["message"] == MESSAGES["unsupported_content_coding"]


@pytest.mark.parametrize("field", ["foo", "best_of"])
def test_an_unknown_field_sent_as_null_is_refused_as_unknown(field: str) -> None:
    with httpx.Client(transport=transport(), base_url=URL) as c:
        reply = post(c, {**BODY, field: None})
        known = post(c, {**BODY, "temperature": None})  # a known one: left out
    assert (reply.status_code, error_of(reply)["param"]) == (400, field)
    assert error_of(reply)["message"] == MESSAGES["unknown_field"].format(field=field)
    assert known.status_code == 200


# -- a gateway in front ----------------------------------------------------------------------------


def test_a_gateways_pages_and_a_reset_before_the_headers() -> None:
    gateway = API.mock_faults["gateway"]
    with httpx.Client(transport=transport(keys=KEY), base_url=URL) as c:
        for status in (502, 504):
            # in front of the API: no key needed, no validation
            reply = c.post(COMPLETIONS, content=b"{", headers={"X-Mock-Gateway": str(status)})
            assert reply.status_code == status
            assert reply.headers["content-type"] == "text/html"
            assert reply.headers["server"] == gateway["server"]
            assert reply.text == gateway["pages"][status]
        with pytest.raises(httpx.RemoteProtocolError):
            post(c, BODY, **{"X-Mock-Gateway": "reset"})
        bad = post(c, BODY, **{"X-Mock-Gateway": "503"})
    assert bad.status_code == 400 and "X-Mock-Gateway" in error_of(bad)["message"]


# -- record and replay -------------------------------------------------------------------------------


@pytest.fixture()
def cassette(tmp_path: Path) -> Iterator[tuple[Path, RecordsHeaders]]:
    """A cassette of a plain answer and a stream, recorded from the mock through Recorder."""
    path = tmp_path / "tape.jsonl"
    upstream = RecordsHeaders()
    with serve(upstream) as url:
        proxy = Recorder(url, path, API, create_app(MockConfig()))
        with httpx.Client(transport=httpx.WSGITransport(app=proxy), base_url=URL) as c:
            assert post(c, BODY).status_code == 200
            assert post(c, STREAM).status_code == 200
        yield path, upstream


def replayed(path: Path, **settings: Any) -> httpx.Client:
    return httpx.Client(transport=transport(replay=path, **settings), base_url=URL, timeout=30)


def test_the_mocks_headers_mean_the_same_replayed_as_live(
    cassette: tuple[Path, RecordsHeaders],
) -> None:
    path, _ = cassette
    with replayed(path) as tape, httpx.Client(transport=transport(), base_url=URL) as live:
        for headers in (
            {"X-Mock-Status": "503"},
            {"X-Mock-Ttft": "5"},  # a typo: the same 400
            {"X-Mock-Status": "600"},  # a bad value: the same 400
        ):
            answers = [post(client, BODY, **headers) for client in (tape, live)]
            assert [a.status_code for a in answers][0] == answers[1].status_code != 200
            assert error_of(answers[0]) == error_of(answers[1])
        plain = post(tape, BODY)
        assert plain.status_code == 200
        assert plain.headers["content-length"] == str(len(plain.content))
        errored = post(tape, STREAM, **{"X-Mock-Stream-Error-After": "1"})
        lines = [line for line in errored.text.split("\n\n") if line]
        deltas = [line for line in lines if '"choices"' in line]
        assert len(deltas) == 1 and '"error"' in lines[-2] and lines[-1] == "data: [DONE]"
        code = API.mock_faults["stream_error_code"]
        assert json.loads(lines[-2][len("data: ") :])["error"]["code"] == code
        with pytest.raises(httpx.RemoteProtocolError):
            post(tape, STREAM, **{"X-Mock-Stream-Drop-After": "1"})


def test_recording_applies_the_mocks_headers_and_never_sends_them_upstream(
    cassette: tuple[Path, RecordsHeaders],
) -> None:
    path, upstream = cassette
    lines = path.read_text().splitlines()
    with serve(upstream) as url:
        proxy = Recorder(url, path, API, create_app(MockConfig()))
        with httpx.Client(transport=httpx.WSGITransport(app=proxy), base_url=URL) as c:
            forced = post(c, BODY, **{"X-Mock-Status": "500"})
            seen = len(upstream.headers)
            timed = post(c, {**BODY, "seed": 4}, **{"X-Mock-Ttft-Ms": "1"})
    assert (forced.status_code, error_of(forced)["code"]) == (500, "internal_error")
    assert timed.status_code == 200
    assert len(path.read_text().splitlines()) == len(lines) + 1  # the forced one: not recorded
    assert not any(k.startswith("HTTP_X_MOCK") for k in upstream.headers[seen])


def test_replayed_answers_are_counted_in_metrics(cassette: tuple[Path, RecordsHeaders]) -> None:
    path, _ = cassette
    with replayed(path) as tape:
        for _ in range(3):
            assert post(tape, BODY).status_code == 200
        assert post(tape, BODY, **{"X-Mock-Status": "503"}).status_code == 503
        scrape = tape.get("/metrics").text
    route = f'acs_requests_total{{code="",route="{COMPLETIONS}",status="200"}} 3.0'
    forced = (
        f'acs_requests_total{{code="inference_unavailable",route="{COMPLETIONS}",status="503"}} 1.0'
    )
    assert route in scrape and forced in scrape
    assert "acs_generated_tokens_total 12.0" in scrape  # 3 answers of max_tokens 4


def test_a_cassettes_times_are_bounded_scaled_and_a_cut_last_line_survives(
    cassette: tuple[Path, RecordsHeaders], caplog: pytest.LogCaptureFixture
) -> None:
    path, _ = cassette
    lines = path.read_text().splitlines()
    exchange = json.loads(lines[2])  # the stream
    exchange["response"]["chunks"][0][0] = 1e9
    bad = path.with_name("bad.jsonl")
    bad.write_text("\n".join([lines[0], lines[1], json.dumps(exchange)]) + "\n")
    with pytest.raises(ConfigError, match="line 3"):
        Replayer(bad, API, create_app(MockConfig()))
    cut = path.with_name("cut.jsonl")
    cut.write_text("\n".join(lines) + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-write
    with caplog.at_level(logging.WARNING):
        Replayer(cut, API, create_app(MockConfig()))
    assert "line 4 is cut" in caplog.text
    for speed, scaled in ((0.0, False), (4.0, True)):
        waits: list[float] = []
        replayer = Replayer(path, API, create_app(MockConfig()), sleep=waits.append, speed=speed)
        with httpx.Client(transport=httpx.WSGITransport(app=replayer), base_url=URL) as c:
            assert post(c, STREAM).status_code == 200
        recorded = max(chunk[0] for chunk in json.loads(lines[2])["response"]["chunks"])
        assert (max(waits, default=0.0) > 0) is scaled
        assert max(waits, default=0.0) <= recorded / 4 + 0.05


def test_a_query_secret_is_masked_by_its_name(tmp_path: Path) -> None:
    path = tmp_path / "tape.jsonl"
    with serve(RecordsHeaders()) as url:
        proxy = Recorder(url, path, API, create_app(MockConfig()))
        with httpx.Client(transport=httpx.WSGITransport(app=proxy), base_url=URL) as c:
            c.get("/v1/models?sig=sigvalue123456&code=codevalue98765&page=2")
    written = path.read_text()
    assert "sigvalue123456" not in written and "codevalue98765" not in written
    assert "page=2" in written


def test_an_upstream_error_not_in_the_apis_shape_is_recorded_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def front(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        start_response("502 Bad Gateway", [("Content-Type", "text/html")])
        return [b"<html><body>502 Bad Gateway</body></html>"]

    path = tmp_path / "tape.jsonl"
    with serve(front) as url, caplog.at_level(logging.WARNING):
        proxy = Recorder(url, path, API, create_app(MockConfig()))
        with httpx.Client(transport=httpx.WSGITransport(app=proxy), base_url=URL) as c:
            assert post(c, BODY).status_code == 502
    assert f"recorded POST {COMPLETIONS}: the upstream's 502 is not in the API's error shape" in (
        caplog.text
    )
