"""Cassettes that keep no secret and trust no line (issue 44, point 5): a recording proxy in front
of an upstream that quotes whatever it is sent, then replays behind the API's own preflight, each
served in this process (mock_server/cassettes/cassette.py's apps under a real HTTP server); a cassette's
lines checked at load with their line numbers (mock_server/cassettes/tape.py)."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server.config import ConfigError
from contract import spec
from mock_server import MockConfig, create_app
from mock_server.cassettes.cassette import Recorder, Replayer
from mock_server.cassettes.tape import data_of, load
from tests.support.wsgi import Environ, StartResponse, serve

API = spec()
CONF = API.mock_cassette
COMPLETIONS = API.completions_path
KEY = "sk-replay-guard-0123456789abcdef"
PASSWORD = "hunter2-upstream-password"
MASK = CONF["mask"]


def quoting_upstream(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    """An upstream whose every answer quotes the request's key, query and body back, as error
    bodies of real services quote a key they refuse."""
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    data = json.dumps(
        {
            "auth": environ.get("HTTP_AUTHORIZATION", ""),
            "query": environ.get("QUERY_STRING", ""),
            "body": body.decode(),
        }
    ).encode()
    start_response(
        "401 Unauthorized",
        [
            ("Content-Type", "application/json"),
            ("WWW-Authenticate", "Bearer"),
            ("X-Echo", environ.get("HTTP_AUTHORIZATION", "")),
        ],
    )
    return [data]


def forms(secret: str) -> set[str]:
    return {
        secret,
        json.dumps(secret)[1:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
    }


def record(tmp_path: Path, requests: list[dict[str, Any]]) -> Path:
    cassette = tmp_path / "tape.jsonl"
    with serve(quoting_upstream) as upstream:
        with_password = upstream.replace("http://", f"http://user:{PASSWORD}@")
        proxy = Recorder(with_password, cassette, API, create_app(MockConfig()))
        with serve(proxy) as url, httpx.Client(base_url=url, timeout=30) as client:
            for request in requests:
                reply = client.request(**request)
                assert KEY in reply.text  # the client gets what the upstream said
    return cassette


def test_no_secret_is_written_and_a_replay_with_another_key_still_matches(
    tmp_path: Path,
) -> None:
    requests = [
        {
            "method": "POST",
            "url": f"{COMPLETIONS}?api_key={KEY}&n=1",
            "json": {"model": "llama-8b", "prompt": "x", "api_key": KEY, "extra": {"token": KEY}},
            "headers": {"Authorization": f"Bearer {KEY}"},
        },
        {"method": "GET", "url": f"/v1/models?token={KEY}"},
    ]
    cassette = record(tmp_path, requests)
    written = cassette.read_text()
    # (the upstream's URL's userinfo goes as Basic credentials, which it quotes back)
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    leaked = [f for f in forms(KEY) | forms(PASSWORD) | forms(basic) if f in written]
    assert leaked == []
    header = json.loads(written.splitlines()[0])
    assert header["upstream"].startswith("http://127.0.0.1:") and "@" not in header["upstream"]
    exchange = json.loads(written.splitlines()[1])
    assert exchange["path"] == f"{COMPLETIONS}?api_key={MASK}&n=1"
    assert json.loads(exchange["body"][0]) == {
        "model": "llama-8b",
        "prompt": "x",
        "api_key": MASK,
        "extra": {"token": MASK},
    }
    # replayed with another key (behind the API's auth, any key is one): the recorded answer
    replayer = Replayer(cassette, API, create_app(MockConfig()))
    other = "sk-another-key-9876543210"
    with serve(replayer) as url:
        reply = httpx.post(
            f"{url}{COMPLETIONS}?api_key={other}&n=1",
            json={"model": "llama-8b", "prompt": "x", "api_key": other, "extra": {"token": other}},
            headers={"Authorization": f"Bearer {other}"},
        )
    # (the client's key went to the upstream as sent, the userinfo's credentials not in its place)
    assert reply.status_code == 401 and json.loads(reply.text)["auth"] == MASK


UPSTREAM_KEY = "upstream-query-key-0123456789"


def test_an_upstream_url_with_userinfo_and_a_query_is_the_upstreams_own(tmp_path: Path) -> None:
    """Issue 55, items 1-3: `http://user:pw@host:port?api_key=K`: each request goes to the
    upstream's path with the client's query and the upstream's, the client's key as sent; the
    cassette and the answer while the upstream is down hold neither the password nor K."""
    seen: list[tuple[str, str, str]] = []

    def upstream_app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        seen.append(
            (environ["PATH_INFO"], environ.get("QUERY_STRING", ""), environ["HTTP_AUTHORIZATION"])
        )
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']

    cassette = tmp_path / "tape.jsonl"
    with serve(upstream_app) as upstream:
        url = upstream.replace("http://", f"http://user:{PASSWORD}@") + f"?api_key={UPSTREAM_KEY}"
        proxy = Recorder(url, cassette, API, create_app(MockConfig()))
        with serve(proxy) as base, httpx.Client(base_url=base, timeout=30) as client:
            reply = client.post(
                f"{COMPLETIONS}?n=1",
                json={"model": "llama-8b"},
                headers={"Authorization": "Bearer k"},
            )
    assert (reply.status_code, reply.json()) == (200, {"ok": True})
    assert seen == [(COMPLETIONS, f"n=1&api_key={UPSTREAM_KEY}", "Bearer k")]
    written = cassette.read_text()
    assert UPSTREAM_KEY not in written and PASSWORD not in written
    header, exchange = (json.loads(line) for line in written.splitlines())
    assert header["upstream"] == f"{upstream}?api_key={MASK}"
    assert (exchange["path"], exchange["response"]["status"]) == (f"{COMPLETIONS}?n=1", 200)

    # the upstream gone: the 503 names it without its secrets
    proxy = Recorder(url, tmp_path / "down.jsonl", API, create_app(MockConfig()))
    with serve(proxy) as base:
        down = httpx.post(base + COMPLETIONS, json={}, headers={"Authorization": "Bearer k"})
    assert down.json()["error"]["message"] == CONF["upstream_down"].format(
        upstream=f"{upstream}?api_key={MASK}", reason="ConnectError"
    )


def test_an_upstream_that_does_not_answer_never_shows_its_password(tmp_path: Path) -> None:
    from api_server.children import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    proxy = Recorder(
        dead.replace("http://", f"http://user:{PASSWORD}@"),
        tmp_path / "t.jsonl",
        API,
        create_app(MockConfig()),
    )
    with serve(proxy) as url:
        reply = httpx.post(url + COMPLETIONS, json={}, headers={"Authorization": f"Bearer {KEY}"})
    assert reply.json()["error"]["message"] == CONF["upstream_down"].format(
        upstream=dead, reason="ConnectError"
    )
    assert PASSWORD not in (tmp_path / "t.jsonl").read_text()


def cassette_of(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "c.jsonl"
    header = {"cassette": CONF["format"], "spec_version": API.version}
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in [header, *lines])
        + "\n"
    )
    return path


def exchange(**changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "method": "POST",
        "path": COMPLETIONS,
        "body": ['{"model":"llama-8b","prompt":"x","max_tokens":3}'],
        "response": {
            "status": 200,
            "headers": [["Content-Type", "application/json"]],
            "chunks": [[0.01, '{"object":"text_completion"}']],
        },
    }
    response = {**line["response"], **changes.pop("response", {})}
    return {**line, **changes, "response": response}


@pytest.mark.parametrize(
    "line,why",
    [
        ({"method": "POST", "path": COMPLETIONS, "response": exchange()["response"]}, "'body'"),
        (json.dumps(exchange())[:200], "not JSON"),
        (exchange(body=[None, "not base64!"]), "neither text nor base64"),
        (exchange(response={"chunks": [[0.1, None, "@@@"]]}), "neither text nor base64"),
        (exchange(response={"chunks": [[0.1]]}), "exchange"),
        (exchange(response={"status": 99999}), "exchange"),
        (
            exchange(response={"headers": [["X-A", "b\r\nSet-Cookie: x"]]}),
            "the line.response.headers[0][1] must be a header value, which holds no CR, LF or NUL",
        ),
        (
            exchange(response={"headers": [["X A", "b"]]}),
            "the line.response.headers[0][0] must be a header name: a token of RFC 9110",
        ),
        (exchange(path="no-slash"), "exchange"),
    ],
    ids=[
        "no body",
        "truncated",
        "bad base64 body",
        "bad base64 chunk",
        "chunk without data",
        "status 99999",
        "CRLF in a header",
        "space in a header name",
        "path",
    ],
)
def test_a_bad_line_is_refused_at_load_with_its_line_number(
    tmp_path: Path, line: Any, why: str
) -> None:
    path = cassette_of(tmp_path, exchange(), line)
    with pytest.raises(ConfigError) as info:
        load(path, API)
    assert f"{path}: line 3: " in str(info.value) and why in str(info.value)


def test_a_line_past_the_bound_is_refused_without_being_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 4096
    monkeypatch.setitem(API.mock_cassette, "max_line_bytes", bound)
    path = cassette_of(tmp_path, exchange(response={"chunks": [[0.1, "x" * bound]]}))
    with pytest.raises(ConfigError, match=f"line 2: longer than {bound} bytes"):
        load(path, API)


def test_the_index_holds_offsets_and_a_hit_reads_its_line(tmp_path: Path) -> None:
    path = cassette_of(tmp_path, exchange(), exchange(body=['{"prompt":"y"}']))
    tape = load(path, API)
    wheres = [w for ws in tape.by_key.values() for w in ws]
    assert all(isinstance(o, int) and isinstance(n, int) for o, n in wheres) and len(wheres) == 2
    assert [tape.exchange(w) for w in sorted(wheres)] == [
        exchange(),
        exchange(body=['{"prompt":"y"}']),
    ]


def test_a_replay_answers_behind_the_apis_auth_and_serves_its_own_gets(tmp_path: Path) -> None:
    path = cassette_of(tmp_path, exchange())
    keys = MockConfig(keys=(KEY,))
    replayer = Replayer(path, API, create_app(keys))
    body = {"model": "llama-8b", "prompt": "x", "max_tokens": 3}
    with serve(replayer) as url:
        keyless = httpx.post(url + COMPLETIONS, json=body)
        wrong = httpx.post(url + COMPLETIONS, json=body, headers={"Authorization": "Bearer nope"})
        right = httpx.post(url + COMPLETIONS, json=body, headers={"Authorization": f"Bearer {KEY}"})
        models = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        metrics = httpx.get(url + "/metrics")
        miss = httpx.post(
            url + COMPLETIONS,
            json={**body, "max_tokens": 4, "seed": 1},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    invalid = API.error_codes["invalid_api_key"]["status"]
    assert [keyless.status_code, wrong.status_code, right.status_code] == [invalid, invalid, 200]
    assert keyless.json()["error"]["code"] == "invalid_api_key"
    assert right.json() == {"object": "text_completion"}
    assert models.json()["data"][0]["id"] == API.default_model and metrics.status_code == 200
    assert miss.status_code == API.error_codes[CONF["miss_code"]]["status"]
    assert CONF["closest"].format(fields="max_tokens, seed") in miss.json()["error"]["message"]


def test_a_stream_recorded_cut_replays_cut(tmp_path: Path) -> None:
    """Issue 55, item 5: a stream the upstream dropped (curl's exit 18) and one its client left
    are written with how they ended, and replay cut after their last chunk, never whole."""
    from mock_server.hook.faults import DROP_AFTER

    body = {"model": "llama-8b", "prompt": "x", "max_tokens": 6, "stream": True, "ignore_eos": True}
    auth = {"Authorization": f"Bearer {KEY}"}
    cassette = tmp_path / "tape.jsonl"
    mock = create_app(MockConfig())

    def dropping(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        """An upstream that drops the stream itself: the recorder sends no X-Mock-* header on
        (they are the recording mock's own), so this one is asked by a header of its own."""
        if "HTTP_X_UPSTREAM_DROP" in environ:
            environ["HTTP_" + DROP_AFTER.upper().replace("-", "_")] = environ[
                "HTTP_X_UPSTREAM_DROP"
            ]
        return mock(environ, start_response)

    with serve(dropping) as upstream:
        proxy = Recorder(upstream, cassette, API, create_app(MockConfig()))
        with serve(proxy) as url, httpx.Client(base_url=url, timeout=30) as client:
            with (
                pytest.raises(httpx.RemoteProtocolError),
                client.stream(
                    "POST", COMPLETIONS, json=body, headers={**auth, "X-Upstream-Drop": "2"}
                ) as reply,
            ):
                dropped = []
                for data in reply.iter_bytes():
                    dropped.append(data)
        # a client that leaves after its first chunk: the proxy's body closed under it
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": COMPLETIONS,
            "CONTENT_TYPE": "application/json",
            "HTTP_AUTHORIZATION": auth["Authorization"],
        }
        left = {**body, "seed": 5}
        raw = json.dumps(left).encode()
        environ |= {"CONTENT_LENGTH": str(len(raw)), "wsgi.input": __import__("io").BytesIO(raw)}
        answer = iter(proxy(environ, lambda status, headers, exc_info=None: None))
        first = next(answer)
        answer.close()  # type: ignore[attr-defined]
    ends = [
        json.loads(line)["response"].get("end") for line in cassette.read_text().splitlines()[1:]
    ]
    assert ends == ["dropped", "left"]
    with serve(Replayer(cassette, API, create_app(MockConfig()))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            for sent, got in ((body, b"".join(dropped)), (left, first)):
                with (
                    pytest.raises(httpx.RemoteProtocolError),
                    client.stream("POST", COMPLETIONS, json=sent, headers=auth) as reply,
                ):
                    replayed = b""
                    for data in reply.iter_bytes():
                        replayed += data
                assert replayed.startswith(got) and b"[DONE]" not in replayed


def test_a_bad_cassette_at_start_is_one_line_without_the_usage(tmp_path: Path) -> None:
    """Issue 55, item 11: a cassette's fault is not the command line's: exit 2, its one line."""
    import subprocess
    import sys

    path = cassette_of(tmp_path, exchange(response={"status": 99999}))
    run = subprocess.run(
        [sys.executable, "-m", "mock_server", "--replay", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert lines[0].startswith(f"python -m mock_server: error: --replay {path}: line 2: ")


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["my", " sk-", "re", "play", " ok"], ["my", " ***", "", "", " ok"]),
        (["a sk-replay b"], ["a *** b"]),
        (["x sk-re", "play sk-", "replay"], ["x ***", " ***", ""]),
        (["sk-replaysk-replay"], ["***"]),  # adjacent occurrences: one span, one mask
        (["sk-rep", "", "lay!"], ["***", "", "!"]),
        (["nothing", " here"], None),
    ],
)
def test_a_secret_spelled_in_pieces_is_masked_once_in_its_span(
    pieces: list[str], expected: list[str] | None
) -> None:
    from mock_server.cassettes.pieces import masked_pieces

    assert masked_pieces(pieces, ["sk-replay"], MASK) == expected


def test_a_key_inside_a_prompt_is_masked_in_its_token_pieces(tmp_path: Path) -> None:
    """Issue 55, item 4: a key inside a prompt, recorded with echo and logprobs (streamed too) or
    prompt_logprobs: the mock's tokenizer cuts it into pieces; none of the text, tokens,
    top_logprobs keys or decoded tokens written spells it, and the tokens still join to the text."""
    prompt = f"my key is {KEY} ok"
    asked = {"model": "llama-8b", "prompt": prompt, "echo": True, "logprobs": 2, "max_tokens": 4}
    cassette = tmp_path / "tape.jsonl"
    with serve(create_app(MockConfig())) as upstream:
        proxy = Recorder(upstream, cassette, API, create_app(MockConfig()))
        with serve(proxy) as url, httpx.Client(base_url=url, timeout=30) as client:
            for extra in ({"prompt_logprobs": 2}, {"stream": True}):
                reply = client.post(
                    COMPLETIONS, json=asked | extra, headers={"Authorization": f"Bearer {KEY}"}
                )
                assert reply.status_code == 200 and KEY in reply.text  # as the upstream said
    whole, streamed = (json.loads(line) for line in cassette.read_text().splitlines()[1:])

    def body(exchange: dict[str, Any]) -> str:
        return "".join(data_of(chunk).decode() for chunk in exchange["response"]["chunks"])

    choice = json.loads(body(whole))["choices"][0]
    events = [
        json.loads(line[6:])["choices"][0]
        for line in body(streamed).splitlines()
        if line.startswith("data: {")
    ]
    for choices in ([choice], events):
        text = "".join(c["text"] for c in choices)
        tokens = [t for c in choices for t in c["logprobs"]["tokens"]]
        keys = [k for c in choices for row in c["logprobs"]["top_logprobs"] if row for k in row]
        assert text.startswith(f"my key is {MASK} ok")
        special = {t for t in tokens if t.startswith("<|") and t.endswith("|>")}
        assert "".join(t for t in tokens if t not in special) == text
        offsets = [o for c in choices for o in c["logprobs"]["text_offset"]]
        assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        assert KEY[:8] not in "".join(tokens) and KEY[:8] not in "".join(keys)
    rows = [row for row in choice["prompt_logprobs"] if row]
    own = [next(iter(row.values()))["decoded_token"] for row in rows]  # vLLM's: its own first
    assert "".join(own) == f"my key is {MASK} ok"
    assert KEY[:8] not in "".join(e["decoded_token"] for row in rows for e in row.values())


def sse_upstream(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    """An upstream that spells the key across three events, each event cut across two writes,
    gzipped whatever it was asked."""
    import gzip

    start_response("200 OK", [("Content-Type", "text/event-stream"), ("Content-Encoding", "gzip")])
    pieces = ["key: " + KEY[:9], KEY[9:20], KEY[20:] + " done"]
    events = b"".join(
        b"data: " + json.dumps({"choices": [{"index": 0, "text": p}]}).encode() + b"\n\n"
        for p in pieces
    )
    return [gzip.compress(events + b"data: [DONE]\n\n")]


def test_a_key_spelled_across_events_of_a_compressed_stream_is_masked(tmp_path: Path) -> None:
    """A key an answer spells over several events, through an upstream that compresses: the
    upstream is asked for identity, what it compresses anyway is decoded, and the written stream
    reads the mask where the key was; the client got the key, as the upstream said it."""
    cassette = tmp_path / "tape.jsonl"
    with serve(sse_upstream) as upstream:
        proxy = Recorder(upstream, cassette, API, create_app(MockConfig()))
        with serve(proxy) as url:
            reply = httpx.post(
                url + COMPLETIONS, json={}, headers={"Authorization": f"Bearer {KEY}"}
            )
    assert KEY in "".join(
        json.loads(line[6:])["choices"][0]["text"]
        for line in reply.text.splitlines()
        if line.startswith("data: {")
    )
    exchange = json.loads(cassette.read_text().splitlines()[1])
    written = "".join(data_of(chunk).decode() for chunk in exchange["response"]["chunks"])
    texts = [
        json.loads(line[6:])["choices"][0]["text"]
        for line in written.splitlines()
        if line.startswith("data: {")
    ]
    assert texts == ["key: ***", "", " done"] and written.endswith("data: [DONE]\n\n")
    assert "content-encoding" not in {k.lower() for k, _ in exchange["response"]["headers"]}
