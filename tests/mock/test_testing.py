"""mock_server.testing, as a client developer's unit tests use it: the openai SDK, sync
and async, over the in-process transports, and the `acs_mock` fixture's live mock."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from contract import spec
from mock_server.hook.faults import STATUS
from mock_server.hook.profiles import PROFILES
from mock_server.testing import (
    BASE_URL,
    URL,
    LiveMock,
    acs_mock,
    async_transport,
    served,
    transport,
)
from tests.support.metrics import value

__all__ = ["acs_mock"]  # the fixture, imported as a client developer's conftest.py imports it

MODEL = spec().default_model


def test_the_sdk_in_process_with_a_stream_that_arrives_as_it_is_made() -> None:
    shared = transport(tpot_ms=20)
    with (
        httpx.Client(transport=shared) as http,
        httpx.Client(transport=shared, base_url=URL) as probe,
    ):
        client = OpenAI(base_url=BASE_URL, api_key="any", http_client=http, max_retries=0)
        whole = client.completions.create(model=MODEL, prompt="Once", max_tokens=6, seed=4)
        open_at_first: float | None = None
        texts = []
        for chunk in client.completions.create(
            model=MODEL, prompt="Once", max_tokens=6, seed=4, stream=True
        ):
            if open_at_first is None:  # the stream is still being made when its first chunk is here
                open_at_first = value(probe.get("/metrics").text, "acs_open_streams")
            texts.append(chunk.choices[0].text)
        # the stream's worker thread ends its generator just after the last chunk is handed over
        deadline = time.monotonic() + 10
        while (after := value(probe.get("/metrics").text, "acs_open_streams")) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.01)
    assert "".join(texts) == whole.choices[0].text
    assert (open_at_first, after) == (1, 0)


def test_a_load_profile_in_process_paces_as_its_numbers_say() -> None:
    """transport(load_profile=...) takes the profile's numbers (its max_num_seqs among them),
    as `acs-mock --load-profile` does: a request takes at least its first token's time and
    the next token's."""
    profile = PROFILES["llama-8b-h100"].settings
    with httpx.Client(transport=transport(load_profile="llama-8b-h100")) as http:
        client = OpenAI(base_url=BASE_URL, api_key="any", http_client=http, max_retries=0)
        start = time.monotonic()
        done = client.completions.create(
            model=MODEL, prompt="x", max_tokens=2, extra_body={"ignore_eos": True}
        )
        took = time.monotonic() - start
    assert done.usage is not None and done.usage.completion_tokens == 2
    assert took >= (profile["ttft_ms"] + profile["tpot_ms"]) / 1000


def test_the_sdks_errors_in_process() -> None:
    with httpx.Client(transport=transport()) as http:
        client = OpenAI(base_url=BASE_URL, api_key="any", http_client=http, max_retries=0)
        try:
            client.completions.create(
                model=MODEL, prompt="x", max_tokens=2, extra_headers={STATUS: "503"}
            )
        except openai.InternalServerError as error:
            assert error.status_code == 503 and error.code == "inference_unavailable"
        else:
            raise AssertionError("no 503")


def test_the_async_sdk_in_process() -> None:
    async def run() -> tuple[str, str, int]:
        async with httpx.AsyncClient(transport=async_transport(tpot_ms=5)) as http:
            client = AsyncOpenAI(base_url=BASE_URL, api_key="any", http_client=http, max_retries=0)
            whole = await client.completions.create(
                model=MODEL, prompt="Once", max_tokens=5, seed=2
            )
            parts, both = (
                [],
                await asyncio.gather(
                    *[
                        client.completions.create(model=MODEL, prompt="Once", max_tokens=5, seed=2)
                        for _ in range(2)
                    ]
                ),
            )
            async for chunk in await client.completions.create(
                model=MODEL, prompt="Once", max_tokens=5, seed=2, stream=True
            ):
                parts.append(chunk.choices[0].text)
            return whole.choices[0].text, "".join(parts), len({c.choices[0].text for c in both})

    whole, streamed, distinct = asyncio.run(run())
    assert streamed == whole and distinct == 1


def test_the_acs_mock_fixture_is_a_live_mock(acs_mock: LiveMock) -> None:
    with OpenAI(base_url=acs_mock.base_url, api_key="any", max_retries=0) as client:
        c = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=3)
    assert c.object == "text_completion" and acs_mock.base_url.startswith("http://127.0.0.1:")
    assert httpx.get(acs_mock.url + "/health").json() == {"status": "ok"}


def test_the_mock_served_in_process_over_a_socket_answers_as_in_process() -> None:
    """`served()`: a client that takes no transport (urllib here) reaches the mock over a real
    socket, the same seeded request answered as over the in-process transport; its settings
    apply (max_model_len, in GET /v1/models)."""
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 6, "seed": 4}
    with httpx.Client(transport=transport(), base_url=URL) as http:
        expected = http.post("/v1/completions", json=body, headers={"Authorization": "Bearer k"})
    with served() as url:
        request = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            got = json.loads(answer.read())
    assert got["choices"] == expected.json()["choices"] and got["usage"] == expected.json()["usage"]
    with served(max_model_len={MODEL: 64}) as url:
        listed = urllib.request.Request(url + "/v1/models", headers={"Authorization": "Bearer k"})
        models = json.loads(urllib.request.urlopen(listed, timeout=30).read())
    assert {m["id"]: m["max_model_len"] for m in models["data"]}[MODEL] == 64


def test_the_transports_import_without_pytest() -> None:
    """The [mock] extra has no pytest (issue 32): a client developer's own code imports the
    in-process transports and answers a request with pytest nowhere to be found."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "import httpx\nfrom mock_server.testing import URL, transport\n"
        "import mock_server.testing as t\nassert not hasattr(t, 'acs_mock')\n"
        "r = httpx.Client(transport=transport(), base_url=URL).get('/health')\n"
        "print(r.status_code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "200", done.stderr[-2000:]


def test_a_dropped_stream_in_process_raises_as_over_a_socket() -> None:
    """Issue 32: through the in-process transports a drop raised the app's own
    ConnectionResetError, which the SDK does not know; over a socket it is httpx's
    RemoteProtocolError, and the SDK's APIConnectionError."""
    from mock_server.hook.faults import DROP_AFTER
    from mock_server.testing import CUT_BODY

    with OpenAI(
        base_url=BASE_URL,
        api_key="any",
        max_retries=0,
        http_client=httpx.Client(transport=transport()),
    ) as client:
        stream = client.completions.create(
            model=MODEL,
            prompt="x",
            max_tokens=6,
            stream=True,
            extra_body={"ignore_eos": True},
            extra_headers={DROP_AFTER: "2"},
        )
        texts = []
        with pytest.raises(openai.APIConnectionError) as info:
            for chunk in stream:
                texts.append(chunk.choices[0].text)
    assert len(texts) == 2 and isinstance(info.value.__cause__, httpx.RemoteProtocolError)
    assert str(info.value.__cause__) == CUT_BODY

    async def read() -> tuple[int, BaseException]:
        async with httpx.AsyncClient(transport=async_transport(), base_url=URL) as c:
            seen = 0
            try:
                async with c.stream(
                    "POST",
                    spec().completions_path,
                    headers={"Authorization": "Bearer k", DROP_AFTER: "1"},
                    json={
                        "model": MODEL,
                        "prompt": "x",
                        "max_tokens": 6,
                        "stream": True,
                        "ignore_eos": True,
                    },
                ) as r:
                    async for line in r.aiter_lines():
                        seen += line.startswith("data: {")
            except httpx.HTTPError as exc:
                return seen, exc
        raise AssertionError("the stream was not dropped")

    seen, error = asyncio.run(read())
    assert seen == 1 and isinstance(error, httpx.RemoteProtocolError)


INNER_TEST = """
import os
import httpx

def test_the_fixtures_mock(acs_mock):
    data = httpx.get(acs_mock.base_url + "/models", headers={"Authorization": "Bearer k"}).json()["data"]
    assert {m["max_model_len"] for m in data} == {int(os.environ["WANT"])}
"""
OPTIONS = """
@pytest.fixture(scope="session")
def acs_mock_options():
    return ["--max-model-len", "64"]
"""


def test_the_acs_mock_fixture_takes_its_options_from_an_acs_mock_options_fixture(
    tmp_path: Any,
) -> None:
    """Issue 32: the fixture took no options. A client's conftest.py that imports it and
    defines acs_mock_options gets a mock started with them; one that does not, the defaults."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "test_client.py").write_text(INNER_TEST)
    runs = {}
    for name, extra, want in (
        ("with", OPTIONS, 64),
        ("without", "", spec().models[MODEL].max_model_len),
    ):
        (tmp_path / "conftest.py").write_text(
            "import pytest\nfrom mock_server.testing import acs_mock\n" + extra
        )
        env = {
            **os.environ,
            "WANT": str(want),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        runs[name] = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    for name, done in runs.items():
        assert done.returncode == 0 and "1 passed" in done.stdout, (name, done.stdout[-3000:])


def test_a_live_mock_that_logs_every_request_never_wedges() -> None:
    """Its log goes to a file (mock.log): a pipe no one read filled at 64 KiB, and the mock
    stopped at the first log line past it (request 935 with --log-level debug)."""
    from mock_server.testing import live_mock

    # a graceful stop: its last access line is written before the worker goes (live_mock's own
    # default, 0, stops at once and may cut it)
    with live_mock("--log-level", "debug", "--access-log", "--graceful-timeout", "5") as mock:
        with httpx.Client(base_url=mock.url, timeout=10) as client:
            for _ in range(1500):
                assert (
                    client.get("/v1/models", headers={"Authorization": "Bearer k"}).status_code
                    == 200
                )
        assert mock.log.stat().st_size > 64 * 1024  # past what a pipe holds
        # --access-log's lines (gunicorn's, on stdout) are in the log too (issue 55, item 9); the
        # worker writes a request's line after its answer has left, so the last may come late
        deadline = time.monotonic() + 10
        while (count := mock.log.read_text().count('"GET /v1/models HTTP/1.1" 200')) < 1500:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert count == 1500
    assert not mock.log.exists()  # removed with the block


def test_a_live_mock_takes_the_port_its_options_ask_for() -> None:
    """Issue 44: acs_mock had no way to choose its port. `--port N` among the options (as
    acs_mock_options gives them) is where it listens, in both spellings."""
    from api_server.children import free_port
    from mock_server.testing import live_mock

    for spelling in (lambda p: ["--port", str(p)], lambda p: [f"--port={p}"]):
        port = free_port()
        with live_mock("--max-model-len", "64", *spelling(port)) as mock:
            assert mock.url == f"http://127.0.0.1:{port}"
            models = httpx.get(mock.base_url + "/models", headers={"Authorization": "Bearer k"})
            assert {m["max_model_len"] for m in models.json()["data"]} == {64}


def test_a_live_mock_on_a_taken_port_raises_and_names_it() -> None:
    """Issue 55, item 7: a port another server holds is never "ready" with that server behind it."""
    import socket

    from mock_server.testing import live_mock

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError) as raised, live_mock("--port", str(port)):
            pass
    assert str(raised.value) == (
        f"the mock cannot have port {port}: Address already in use (another server holds it)"
    )


@pytest.mark.parametrize("late", ["ttft_ms", "tpot_ms"])
def test_a_cancelled_async_request_leaves_no_thread_that_holds_exit(late: str) -> None:
    """Issue 55, item 8: cancelling an in-process async request (asyncio.wait_for), before its
    answer or between two chunks of its stream, leaves nothing the interpreter's exit waits for
    (no thread but daemon ones: the step finishes in its worker)."""
    import threading

    before = set(threading.enumerate())

    async def cancelled() -> None:
        http = httpx.AsyncClient(transport=async_transport(**{late: 15_000}))
        client = AsyncOpenAI(base_url=BASE_URL, api_key="k", max_retries=0, http_client=http)

        async def read() -> None:
            stream = await client.completions.create(
                model=MODEL, prompt="x", max_tokens=3, stream=True
            )
            async for _ in stream:
                pass

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(read(), 0.5)
        await http.aclose()

    asyncio.run(cancelled())
    holding = [t for t in set(threading.enumerate()) - before if not t.daemon and t.is_alive()]
    assert holding == []
