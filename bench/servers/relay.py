"""The floor under any gevent API in front of vLLM: a relay that only copies bytes.

    .venv/bin/python -m bench.servers.relay --upstream http://127.0.0.1:8001 --port 8002

Each client connection gets its own connection upstream; the relay copies the client's
bytes to it as they come, and what the upstream answers back, one send per read, until the
end of a chunked body (`0\\r\\n\\r\\n`), and closes. It parses nothing, checks nothing, and
holds no Flask, no WSGI and no JSON: its CPU per streamed token is what a read from vLLM's
socket and a write to the client's cost under gevent on this machine, which no API in
Python can go below (bench.reference_load measures it beside the reference). For one
streamed request per connection, as the load client sends them; it is a measuring stick,
not a proxy.
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import socket  # noqa: E402
from collections.abc import Callable  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402
from gevent.server import StreamServer  # noqa: E402

from api_server.patches import send_all  # noqa: E402  (the API's own send: no buffer-size query)

END = b"0\r\n\r\n"


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            send_all(target, data)
    except OSError:  # the other side closed them: the answer is over
        pass


def relay(upstream: tuple[str, int]) -> Callable[[socket.socket, object], None]:
    def handle(client: socket.socket, _address: object) -> None:
        with client, socket.create_connection(upstream) as vllm:
            vllm.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            gevent.spawn(
                _copy, client, vllm
            )  # the request, as it comes (a head and a body may be two sends)
            tail = b""
            while True:
                data = vllm.recv(65536)
                if not data:
                    return
                send_all(client, data)
                tail = tail[-8:] + data
                if tail.endswith(END):
                    return

    return handle


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    url = urlsplit(args.upstream)
    server = StreamServer(
        (args.host, args.port), relay((url.hostname or "127.0.0.1", url.port or 80)), backlog=4096
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
