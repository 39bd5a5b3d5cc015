"""bench/servers/fake_vllm.py and bench/servers/relay.py, which bench/reference_load.py measures the reference
against: the fake's answers are vLLM's shape as the reference reads them (streamed and whole),
and the relay passes a stream through unchanged. A bench whose upstream the reference could not
read would measure error paths.
"""

from __future__ import annotations

import httpx
import pytest

from api_server import ServerConfig, create_app
from bench.servers.fake_vllm import TOKENS
from contract import spec
from reference_impl.engine import VllmEngine
from tests.support.mock import parse_sse
from tests.support.vllm_stream import AUTH, KEY, MODEL, events

PROMPT = [128000, 791, 13180, 374]


@pytest.mark.parametrize("stream", [True, False])
def test_the_reference_reads_the_fake_vllm(upstreams: tuple[str, str], stream: bool) -> None:
    engine = VllmEngine(upstreams[0].url, MODEL, api=spec())
    app = create_app(ServerConfig(keys=(KEY,)), engine)
    body = (
        {
            "model": MODEL,
            "prompt": PROMPT,
            "max_tokens": 5,
            "stream": stream,
            "stream_options": {"include_usage": True},
        }
        if stream
        else {"model": MODEL, "prompt": PROMPT, "max_tokens": 5}
    )
    try:
        with httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
        ) as c:
            r = c.post("/v1/completions", json=body)
    finally:
        engine.close()
    assert r.status_code == 200, r.text
    words = [TOKENS[k % len(TOKENS)][0] for k in range(1, 6)]  # the fake's k-th token is TOKENS[k]
    usage = {"prompt_tokens": len(PROMPT), "completion_tokens": 5, "total_tokens": len(PROMPT) + 5}
    if stream:
        got = events(r.text)
        assert got[-1] == "[DONE]"
        chunks = [e for e in got[:-1] if isinstance(e, dict)]
        assert [c["choices"][0]["text"] for c in chunks if c["choices"]] == words
        assert chunks[-1]["usage"] == usage
    else:
        answer = r.json()
        assert answer["choices"][0]["text"] == "".join(words)
        assert answer["choices"][0]["finish_reason"] == "length"
        assert answer["usage"] == usage


def test_the_relay_passes_the_stream_through_unchanged(upstreams: tuple[str, str]) -> None:
    body = {
        "prompt": PROMPT,
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got = []
    for server in (
        upstreams
    ):  # each on a connection of its own, as the relay serves one request per connection
        with httpx.Client(base_url=server.url, headers={"X-Request-Id": "abc"}) as c:
            got.append(c.post("/v1/completions", json=body).text)
    direct, relayed = (parse_sse(text) for text in got)
    # `created` is the second each was made in: of every event, the usage event's too (two
    # requests a second apart differed there alone, under CI's load)
    for event in direct.events + relayed.events:
        if isinstance(event, dict):
            event.pop("created")
    assert relayed == direct and direct.events[-1] == "[DONE]" and len(direct.events) == 5
