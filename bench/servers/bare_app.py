"""The ceiling for bench.http_bench: a bare Flask app with fixed bodies.

It does the least a completions server must do: read the body, parse it as JSON,
and answer. A `max_tokens` that is not an integer gets a fixed 400 error body; any
other request gets a fixed 16-token Completion, or, with `"stream": true`, a
stream of `max_tokens` fixed one-token chunks (the first at once, each later one
after X-Mock-Tpot-Ms, as the mock's) and `data: [DONE]`. The bodies have
the API's shapes and about the mock's sizes, so the ceiling pays for the same
bytes on the wire. Nothing is validated, tokenized or generated.

Run under the mock's server settings by http_bench (api_server/serve.py):
    python -m bench.servers.bare_app --port P --workers N [--worker gevent|gthread]
"""

import json
import os
import time

from flask import Flask, Response, request

_REQUEST_ID = "req_" + "0" * 32

ERROR_BODY = json.dumps(
    {
        "error": {
            "message": "Invalid type for 'max_tokens': expected a number.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "invalid_request",
        },
        "request_id": _REQUEST_ID,
    }
)

COMPLETION_BODY = json.dumps(
    {
        "id": "cmpl-" + "0" * 32,
        "object": "text_completion",
        "created": 0,
        "model": "llama-8b",
        "choices": [
            {
                "index": 0,
                "text": " blue, and the sun is shining brightly over the hills today.",
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20},
    }
)

_CHUNK = (
    "data: "
    + json.dumps(
        {
            "id": "cmpl-" + "0" * 32,
            "object": "text_completion",
            "created": 0,
            "model": "llama-8b",
            "choices": [
                {
                    "index": 0,
                    "text": " sky",
                    "logprobs": None,
                    "finish_reason": None,
                    "stop_reason": None,
                }
            ],
        }
    )
    + "\n\n"
).encode()

_HEADERS = {"X-Request-Id": _REQUEST_ID}

app = Flask(__name__)


@app.get("/health")
def health():
    return Response('{"status": "ok"}', mimetype="application/json", headers=_HEADERS)


@app.post("/v1/completions")
def completions():
    body = json.loads(request.get_data())
    if type(body.get("max_tokens")) is not int:
        return Response(ERROR_BODY, status=400, mimetype="application/json", headers=_HEADERS)
    if body.get("stream") is True:
        # The mock's X-Mock-Tpot-Ms, so that the ceiling of a paced stream (d) waits as long
        # per token: time.sleep is gevent's under the default worker.
        tpot_s = float(request.headers.get("X-Mock-Tpot-Ms", 0)) / 1000
        return Response(
            _stream(body["max_tokens"], tpot_s), mimetype="text/event-stream", headers=_HEADERS
        )
    return Response(COMPLETION_BODY, mimetype="application/json", headers=_HEADERS)


def _stream(count, tpot_s=0.0):
    # As the mock paces (mock_server/hook/latency.py) with its default time to first token, 0:
    # the first chunk at once, each later one after tpot_s.
    for i in range(count):
        if tpot_s and i:
            time.sleep(tpot_s)
        yield _CHUNK
    yield b"data: [DONE]\n\n"


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.servers.bare_app --port P [--workers N --worker W ...]`: the ceiling under
    the server the mock runs on (api_server/serve.py: the same options and defaults)."""
    import argparse
    from types import SimpleNamespace

    from api_server.config import ServerConfig
    from api_server.serve import add_arguments, gunicorn_options, prepare, serve
    from api_server.state import STATE
    from contract import Contract, spec

    p = argparse.ArgumentParser(description="the bare Flask ceiling")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    add_arguments(p, lambda name, default: default, os.cpu_count() or 1)
    args = p.parse_args(argv)
    prepare(args.worker)
    # What the API's workers read of an app (api_server/worker.py): the body-read timeout
    # and the words of their early errors, the spec's.
    api = spec()
    app.extensions[STATE] = SimpleNamespace(
        config=ServerConfig().for_spec(api), contract=Contract(api)
    )
    serve(
        app,
        gunicorn_options(
            args.host,
            args.port,
            args.workers,
            args.threads,
            worker=args.worker,
            connections=args.connections,
        ),
    )


if __name__ == "__main__":
    main()
