"""A gallery of lying servers (issue 42): the mock behind a WSGI middleware that misleads the
gate the way real deployments do, each counting what the mock really generated (`generated`),
the server's own count that the gate's token promise is held to.

- "ignores max_tokens": every positive max_tokens read as four times itself, plus 50;
- "ignores max_tokens, lies in usage": the same, its usage saying what max_tokens allowed;
- "resets first attempts": each distinct request is generated, then its connection reset
  without an answer; the same request again is answered;
- "500 under a version header": every refusal answered with the API's own body but status 500,
  and GET /v1/models with a version header of its own (a gateway that answers it itself);
- "quotes the Authorization header": any scheme accepted (`Token KEY` too), every refusal's
  message quoting the request's Authorization header, as such and base64-encoded;
- "drops the seed": a seeded coin drops `seed` from a quarter of the requests that carry one;
- "accepts unknown fields": fields the spec does not know dropped before the mock sees them (as
  plain vLLM accepts them), and every refusal's message holding sampled text of its own;
- "quotes the key across the cuts": every refusal quotes the request's key where the gate cuts
  what it quotes, across the cut of a server's message (SAID_CHARS) and of a body (4 KiB);
- "echoes the key in other forms": every refusal's message quotes the request's key in another
  form in turn (each character a JSON `\\uXXXX` escape, `/` written `\\/`, each character
  percent-encoded, split by one space), and each stream's first two texts are its two halves;
- "claims a million once": the first answer with a usage says 1,000,000 completion tokens, and
  `seed` is dropped from every request (real failures behind a claim that would blow the ceiling);
- "429 on first attempts": each distinct request first answered 429 with Retry-After 0;
- "silent when slowed": a stream asked to wait for its first token (the mock's X-Mock-Ttft-Ms)
  sends its headers, then nothing at all;
- "seed at temperature 1 only": `seed` dropped wherever the temperature is not 1;
- "streams drop the seed": a seeded coin drops `seed` from a quarter of the streams;
- "ignores max_tokens in plain answers": max_tokens read as 4x+50 only where the answer shows
  no count (no stream, logprobs, prompt_logprobs, token ids or echo), its usage saying what
  max_tokens allowed;
- "drops the seed for the SDK": `seed` dropped from every request that carries the openai SDK's
  headers (X-Stainless-Lang), honoured for any other client (a gate that is not one);
- "claims one layer": GET /v1/models says the model has 1 layer (it has its 32), and steering
  vectors are dropped (a claim that would skip every steering check);
- "claims a long context": GET /v1/models says max_model_len is the Model schema's most (the
  checks it sizes could not be sent), the model's own context behind it;
- "keys on last run's seeds": `seed` honoured only where it is one the gate drew in another run
  (run seed LAST_RUN: its seeded requests' seed, the next one, the other seeds), dropped for any
  other (a deployment tuned on the gate's last report).

- "twin says stop": "ignores max_tokens in plain answers", and each answer that shows its token
  ids (the counted twin) honest but for finish_reason "stop";
- "inflates schemathesis's max_tokens": max_tokens read as 40x+200 where the request carries
  schemathesis's X-Schemathesis-TestCaseId header (the gate's fuzzing told apart);
- the ways of DRAWN (issue 63): wrong only where the gate's fixed points never looked (long
  prompts, max_tokens past 16, the default max_tokens, long stop strings, temperatures without
  top_k, top_p of [0.01, 1)), each the request rewrite of gallery/wrong.py's way of that name.
- the ways of ELSEWHERE (issue 63): wrong where a fixed point looked too little (n of 4 or more,
  a logprobs row past 5), each gallery/wrong.py's way of that name;
- "loose beside a stream": gallery/wrong.py's LooseInFlight behind the liar (`gallery_app`):
  while a stream is in flight, a plain request's seed dropped and its max_tokens run 8 past;
- "twin shows the plain text": "ignores max_tokens in plain answers", and each answer that
  shows its token ids (the counted twin) honest in its ids and its usage but for its text, the
  long text the same request's plain answer had;
- "429 after generating a quarter" / "429 after generating every first attempt": each distinct
  request (a quarter of them, by a seeded coin, or every one) generated whole, then answered
  429 with Retry-After 0 (a gateway that meters after the engine ran); ARGS: the gate paced.
CHECKS names the checks a way is held to where its whole run would cost more than it shows (the
gallery runs those only); the others run the full profile.
"""

from __future__ import annotations

import base64
import functools
import json
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from conformance.engine.draws import Draws
from conformance.engine.runner import OVERSPEND
from contract import spec
from gallery.breaker import _known_fields
from gallery.effects import _valid
from gallery.support import PACED_TPOT_MS, Environ, StartResponse
from gallery.wrong import WRONGS, LooseInFlight
from mock_server import create_app
from mock_server.config import MockConfig

WAYS: tuple[str, ...] = (
    "ignores max_tokens",
    "ignores max_tokens, lies in usage",
    "resets first attempts",
    "500 under a version header",
    "quotes the Authorization header",
    "drops the seed",
    "accepts unknown fields",
    "quotes the key across the cuts",
    "echoes the key in other forms",
    "claims a million once",
    "429 on first attempts",
    "silent when slowed",
    "seed at temperature 1 only",
    "streams drop the seed",
    "ignores max_tokens in plain answers",
    "drops the seed for the SDK",
    "claims one layer",
    "claims a long context",
    "keys on last run's seeds",
)
# issue 63's servers: the liar's way -> gallery/wrong.py's way, and the check that names it
DRAWN = {
    "ignores long prompts' bounds": ("long prompts unbounded", "drawn:max_tokens"),
    "cuts at 16 tokens": ("cut at 16", "drawn:max_tokens"),
    "defaults max_tokens to 16": ("default max_tokens 16", "drawn:default_max_tokens"),
    "drops long stop strings": ("long stops dropped", "drawn:stop"),
    "samples at 1 without top_k": ("temperature 1 without top_k", "drawn:temperature"),
    "drops top_p": ("top_p dropped in [0.01, 1)", "drawn:top_p"),
}
# issue 63's servers wrong where a fixed point looked too little: the same, held to the check
ELSEWHERE = {
    "copies n of 4 or more": ("n of 4 or more copied", "model:n.children"),
    "caps logprobs at 5": ("logprobs capped at 5", "golden:range.logprobs.maximum.at"),
}
LATE_429 = {"429 after generating a quarter": 0.25, "429 after generating every first attempt": 1.0}
WAYS += (
    *DRAWN,
    *ELSEWHERE,
    "twin says stop",
    "twin shows the plain text",
    "inflates schemathesis's max_tokens",
    "loose beside a stream",
    "429 after generating every first attempt",
)
# not in the gallery: a 429 within the run's retry bound is a rate limit's answer, which the gate
# waits out and counts (tests/conformance/test_liars.py holds its ceiling)
QUARTER_429 = "429 after generating a quarter"
# the gate's options a way is run with besides the gallery's own
ARGS = dict.fromkeys(LATE_429, ("--rate-limit", "50"))
# way -> (a failed check's id globs, space-separated, the start of one of its findings): the
# finding that names what the way does. A way not here is not proven (exit 3): its claim kept
# the checks from running.
DEFECT: dict[str, tuple[str, str]] = {
    "ignores max_tokens": ("premise:max_tokens", "the server wrote"),
    "ignores max_tokens, lies in usage": ("premise:max_tokens", "the server wrote"),
    "resets first attempts": ("*", "the connection was closed before an answer"),
    "500 under a version header": ("*", "status 500, expected 4"),
    "quotes the Authorization header": ("auth:malformed_key", "status 200, expected 401"),
    "drops the seed": ("determinism:seed", "the same seed"),
    "accepts unknown fields": ("golden:unknown.*", ""),
    "quotes the key across the cuts": ("golden:*", "the body differs"),
    "echoes the key in other forms": ("golden:*", "the body differs"),
    "claims a million once": ("premise:end_tokens", "the usage claims 1000000"),
    "429 on first attempts": ("*", "status 429, expected"),
    "silent when slowed": ("stream:keepalive", "the stream went silent"),
    "seed at temperature 1 only": ("determinism:seed", "the same seed"),
    "streams drop the seed": ("stream:text_equals_non_stream", "streamed:"),
    "ignores max_tokens in plain answers": ("*", OVERSPEND),
    "drops the seed for the SDK": ("determinism:seed", "the same seed"),
    "claims one layer": ("lens:layer_out_of_range", "status 200, expected 400"),
    "keys on last run's seeds": ("determinism:seed", "the same seed"),
    **{way: (check, "") for way, (_, check) in {**DRAWN, **ELSEWHERE}.items()},
    "twin says stop": ("*", OVERSPEND),
    "twin shows the plain text": ("*", OVERSPEND),
    "inflates schemathesis's max_tokens": ("schema:*", OVERSPEND),
    # whichever request beside a held stream the host's timing lets overlap it
    "loose beside a stream": ("isolation:steering.same_batch drawn:beside_stream", ""),
    "429 after generating every first attempt": ("*", "status 429, expected"),
}
# what makes an answer show its count: the fields a plain answer has none of
COUNTED = ("stream", "logprobs", "prompt_logprobs", "return_token_ids", "echo")
CHECKS = {
    "quotes the key across the cuts": ("auth:*", "golden:*"),
    "echoes the key in other forms": ("golden:*", "stream:*"),
    "silent when slowed": ("stream:keepalive",),
    "seed at temperature 1 only": ("determinism:*",),
    "streams drop the seed": ("stream:text_equals_non_stream",),
    "drops the seed for the SDK": ("determinism:*",),
    "keys on last run's seeds": ("determinism:*",),
    "claims one layer": ("effects:steering.*", "isolation:*", "golden:steering.*", "lens:*"),
    "claims a long context": ("caps:*", "golden:caps.*", "isolation:*"),
    **dict.fromkeys(DRAWN, ("drawn:*",)),
    "inflates schemathesis's max_tokens": ("schema:*",),
}
COMPLETIONS = spec().completions_path
SAMPLED = ("the", "sky", "was", "green", "over", "a", "quiet", "harbour", "and", "then")


def _sampled_text(rng: random.Random) -> str:
    return " ".join(rng.choice(SAMPLED) for _ in range(6))


def _tokens(chunk: bytes) -> int:
    """Tokens in the SSE events of one chunk the mock wrote: a choice of an event a token."""
    count = 0
    for line in chunk.decode("utf-8", "replace").splitlines():
        if line.startswith("data: {"):
            try:
                payload = json.loads(line[len("data: ") :])
            except ValueError:
                continue
            count += len(payload.get("choices") or [])
    return count


TWINS = ("twin says stop", "twin shows the plain text")  # plain answers past max_tokens, twinned


def gallery_app(way: str) -> Any:
    """The app a way's liar stands in front of: the mock, or the mock behind a wrong batch."""
    if way == "loose beside a stream":  # paced, so a stream is in flight when others come
        return LooseInFlight(create_app(MockConfig(tpot_ms=PACED_TPOT_MS)))
    return create_app(MockConfig())


LAST_RUN = 2  # the run seed "keys on last run's seeds" learnt its seeds from


@functools.cache
def _last_run_seeds() -> frozenset[int]:
    drawn = Draws.of(LAST_RUN)
    return frozenset({drawn.seed, drawn.seed + 1, *drawn.other_seeds})


class Liar:
    """`app` (the mock) doing `way`; `generated` what the mock wrote for it, every request."""

    def __init__(self, app: Any, way: str, coin: int = 0) -> None:
        assert way in (*WAYS, QUARTER_429), way
        self.app, self.way = app, way
        self.rng = random.Random(coin)
        self.generated = 0
        self._seen: set[bytes] = set()
        self._echoes = 0  # refusals that echoed the key (echoes the key in other forms)
        self._texts: dict[str, list[Any]] = {}  # plain answers' texts (twin shows the plain text)
        self._lock = threading.Lock()

    # -- the request -------------------------------------------------------------------------

    def _rewrite(self, body: dict[str, Any]) -> dict[str, Any]:
        limit = body.get("max_tokens")
        plain = all(body.get(field) is None or body.get(field) is False for field in COUNTED)
        plain_only = ("ignores max_tokens in plain answers", *TWINS)
        if (
            (self.way.startswith("ignores max_tokens") or self.way in TWINS)
            and (plain or self.way not in plain_only)
            and type(limit) is int
            and limit > 0
        ):
            body = {**body, "max_tokens": 4 * limit + 50}
        if self.way == "claims a million once":
            body = {k: v for k, v in body.items() if k != "seed"}
        if self.way == "seed at temperature 1 only" and body.get("temperature", 1) != 1:
            body = {k: v for k, v in body.items() if k != "seed"}
        if (
            self.way == "streams drop the seed"
            and body.get("stream") is True
            and self.rng.random() < 0.25
        ):
            body = {k: v for k, v in body.items() if k != "seed"}
        if self.way == "drops the seed" and "seed" in body and self.rng.random() < 0.25:
            body = {k: v for k, v in body.items() if k != "seed"}
        if self.way == "accepts unknown fields":
            body = {k: v for k, v in body.items() if k in _known_fields()}
        if self.way == "keys on last run's seeds" and body.get("seed") not in _last_run_seeds():
            body = {k: v for k, v in body.items() if k != "seed"}
        if self.way == "claims one layer":
            body = {k: v for k, v in body.items() if k != "apply_steering_vectors"}
        wrong = {**DRAWN, **ELSEWHERE}.get(self.way)
        rewrite = WRONGS[wrong[0]][0] if wrong else None
        if rewrite is not None and _valid(body):
            body = rewrite(body, spec().models[body["model"]])
        return body

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:  # hostile framing: the mock's own server judges it
            return self.app(environ, start_response)
        raw = environ["wsgi.input"].read(length)
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if (
            self.way == "quotes the Authorization header"
            and auth
            and not auth.startswith("Bearer ")
        ):
            environ["HTTP_AUTHORIZATION"] = "Bearer " + auth.split(" ", 1)[-1]
        asked: dict[str, Any] | None = None
        if path == COMPLETIONS and method == "POST":
            try:
                asked = json.loads(raw)
            except (ValueError, RecursionError):
                asked = None
            if isinstance(asked, dict):
                if self.way == "drops the seed for the SDK" and environ.get(
                    "HTTP_X_STAINLESS_LANG"
                ):
                    asked = {k: v for k, v in asked.items() if k != "seed"}
                sent = self._rewrite(asked)
                limit = sent.get("max_tokens")
                if (
                    self.way == "inflates schemathesis's max_tokens"
                    and environ.get("HTTP_X_SCHEMATHESIS_TESTCASEID")
                    and type(limit) is int
                    and limit > 0
                ):
                    sent = {**sent, "max_tokens": 40 * limit + 200}
                if sent != json.loads(raw):  # as sent where unchanged: its size the gate's
                    raw = json.dumps(sent).encode()
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = _Body(raw), str(len(raw))
        if (
            self.way == "silent when slowed"
            and environ.get("HTTP_X_MOCK_TTFT_MS")
            and isinstance(asked, dict)
            and asked.get("stream") is True
        ):
            start_response("200 OK", [("Content-Type", "text/event-stream")])
            return _silence(SILENCE_S)
        firsts = ("resets first attempts", "429 on first attempts", *LATE_429)
        if self.way in firsts and method == "POST":
            key = path.encode() + b" " + raw
            with self._lock:
                first = key not in self._seen and self.rng.random() < LATE_429.get(self.way, 1)
                self._seen.add(key)
            if first and self.way == "resets first attempts":
                return self._reset(environ)
            if first:
                if self.way in LATE_429:  # the engine ran first
                    self._generated(*self._inner(environ))
                start_response("429 Too Many Requests", [("Retry-After", "0")])
                return [b'{"error": {"message": "slow down", "type": "rate_limit"}}']
        status, headers, chunks = self._inner(environ)
        code = int(status.split()[0])
        if path == "/v1/models" and self.way == "500 under a version header":
            headers.append(("X-Gateway-Version", "2.4.1"))
        if "text/event-stream" in dict(headers).get("Content-Type", ""):
            start_response(status, headers)
            if self.way == "echoes the key in other forms":
                return self._counted(_halves_in_events(chunks, auth.split(" ", 1)[-1]))
            return self._counted(chunks)
        body = b"".join(chunks)
        self._count_json(body, code)
        if path == "/v1/models" and code == 200:
            body = self._claim(body)
        body, code = self._lie(body, code, asked, auth)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(
            f"{code} {'LIE' if code != int(status.split()[0]) else status.split(' ', 1)[1]}",
            headers + [("Content-Length", str(len(body)))],
        )
        return [body]

    # -- the answer ----------------------------------------------------------------------------

    def _inner(self, environ: Environ) -> tuple[str, list[tuple[str, str]], Iterator[bytes]]:
        got: dict[str, Any] = {}

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            got["status"], got["headers"] = status, list(headers)

        body = iter(self.app(environ, start))
        first = next(body, b"")  # a WSGI app starts its response by its first chunk

        def chunks() -> Iterator[bytes]:
            try:
                yield first
                yield from body
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

        return got["status"], got["headers"], chunks()

    def _counted(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            with self._lock:
                self.generated += _tokens(chunk)
            yield chunk

    def _count_json(self, body: bytes, code: int) -> None:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return
        usage = data.get("usage") if isinstance(data, dict) and code == 200 else None
        if isinstance(usage, dict):
            with self._lock:
                self.generated += int(usage.get("completion_tokens") or 0)

    def _claim(self, body: bytes) -> bytes:
        """GET /v1/models' numbers, as the way claims them."""
        claims = {
            "claims one layer": {"num_layers": 1},
            "claims a long context": {
                "max_model_len": spec().schema("Model")["properties"]["max_model_len"]["maximum"]
            },
        }.get(self.way)
        if claims is None:
            return body
        data = json.loads(body)
        for entry in data.get("data") or []:
            entry.update(claims)
        return json.dumps(data).encode()

    def _lie(
        self, body: bytes, code: int, asked: dict[str, Any] | None, auth: str
    ) -> tuple[bytes, int]:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return body, code
        error = data.get("error") if isinstance(data, dict) else None
        if (
            code == 200
            and self.way
            in (
                "ignores max_tokens, lies in usage",
                "ignores max_tokens in plain answers",
                *TWINS,
            )
            and isinstance(asked, dict)
        ):
            limit = asked.get("max_tokens")
            usage = data.get("usage")
            if type(limit) is int and isinstance(usage, dict):
                said = min(usage["completion_tokens"], limit * len(data.get("choices") or []))
                usage.update(completion_tokens=said, total_tokens=usage["prompt_tokens"] + said)
        if (
            code == 200
            and self.way == "twin says stop"
            and isinstance(asked, dict)
            and asked.get("return_token_ids")
            and isinstance(data, dict)
        ):
            for choice in data.get("choices") or []:
                choice["finish_reason"] = "stop"
        if code == 200 and self.way == "twin shows the plain text" and isinstance(asked, dict):
            data = self._plain_text(asked, data)
        wrong = ELSEWHERE.get(self.way)
        answers = WRONGS[wrong[0]][1] if wrong else None
        if code == 200 and answers is not None and isinstance(asked, dict) and _valid(asked):
            data = answers(asked, data)
        if code == 200 and self.way == "claims a million once" and isinstance(data, dict):
            usage = data.get("usage")
            with self._lock:
                claim = isinstance(usage, dict) and not self._seen
                if claim:
                    self._seen.add(b"claimed")
            if claim and isinstance(usage, dict):
                usage.update(completion_tokens=1_000_000)
        if isinstance(error, dict) and 400 <= code < 500:
            if self.way == "500 under a version header":
                code = 500
            elif self.way == "quotes the Authorization header":
                encoded = base64.b64encode(auth.encode()).decode()
                error["message"] = (
                    f"{error.get('message')} (Authorization: {auth!r}, as sent: {encoded})"
                )
            elif self.way == "accepts unknown fields":
                error["message"] = f"{error.get('message')} [{_sampled_text(self.rng)}]"
            elif self.way == "quotes the key across the cuts":
                return _across_cuts(data, auth.split(" ", 1)[-1]), code
            elif self.way == "echoes the key in other forms":
                with self._lock:
                    self._echoes += 1
                    turn = self._echoes
                error["message"] = f"{error.get('message')} (key: {PLACE})"
                form = _other_form(auth.split(" ", 1)[-1], turn)
                return json.dumps(data).replace(PLACE, form).encode(), code
        return json.dumps(data).encode(), code

    def _plain_text(self, asked: dict[str, Any], data: Any) -> Any:
        """A plain answer's texts kept; a twin's (the same request with its ids) made them."""
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            return data
        key = json.dumps(
            {k: v for k, v in asked.items() if k != "return_token_ids"}, sort_keys=True
        )
        if asked.get("return_token_ids"):
            with self._lock:
                texts = self._texts.get(key)
            for choice, text in zip(data["choices"], texts or (), strict=False):
                choice["text"] = text
        elif all(asked.get(field) in (None, False) for field in COUNTED):
            with self._lock:
                self._texts[key] = [c.get("text") for c in data["choices"]]
        return data

    def _generated(
        self, status: str, headers: list[tuple[str, str]], chunks: Iterator[bytes]
    ) -> None:
        """The whole answer generated and counted, and not a byte of it sent."""
        body = b"".join(chunks)
        if "text/event-stream" in dict(headers).get("Content-Type", ""):
            with self._lock:
                self.generated += _tokens(body)
        else:
            self._count_json(body, int(status.split()[0]))

    def _reset(self, environ: Environ) -> list[bytes]:
        """Generate the whole answer, then reset the connection without a byte of it."""
        self._generated(*self._inner(environ))
        sock = environ.get("werkzeug.socket")
        assert isinstance(sock, socket.socket), (
            "the reset needs the connection's socket (werkzeug's server)"
        )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
        raise ConnectionResetError("reset on purpose")


SILENCE_S = 11.0  # past the gate's --timeout for stream:keepalive in these tests (8 s)


def _silence(seconds: float) -> Iterator[bytes]:
    yield b"\n"  # an empty line: werkzeug's server sends the headers with the first bytes
    time.sleep(seconds)


PLACE = "@@KEY@@"  # where a form of the key goes in a body, after json.dumps


def _other_form(key: str, turn: int) -> str:
    """The key as raw body text, in one of four forms by turn."""
    forms = (
        "".join(f"\\u{ord(c):04x}" for c in key),  # JSON's escapes: the body still says the key
        key.replace("/", "\\/"),
        "".join(f"%{b:02X}" for b in key.encode()),
        f"{key[: len(key) // 2]} {key[len(key) // 2 :]}",
    )
    return forms[turn % len(forms)]


def _halves_in_events(chunks: Iterator[bytes], key: str) -> Iterator[bytes]:
    """The stream with its first two events' texts the key's two halves."""
    halves = [key[: len(key) // 2], key[len(key) // 2 :]]
    for chunk in chunks:
        lines = chunk.split(b"\n")
        for i, line in enumerate(lines):
            if halves and line.startswith(b"data: {"):
                event = json.loads(line[len(b"data: ") :])
                if event.get("choices"):
                    event["choices"][0]["text"] = halves.pop(0)
                    lines[i] = b"data: " + json.dumps(event).encode()
        yield b"\n".join(lines)


def _across_cuts(data: dict[str, Any], key: str) -> bytes:
    """`data` with `key` across the gate's cuts: its message's 160th character, its body's
    4,096th byte."""
    from conformance.engine.context import SAID_CHARS
    from conformance.wire.exchange import QUOTE_LIMIT_BYTES

    data["error"]["message"] = "m" * (SAID_CHARS - len(key) // 2) + key + " (as sent)"
    data["note"] = ""
    at = json.dumps(data).index('"note": ""') + len('"note": "')
    data["note"] = "n" * (QUOTE_LIMIT_BYTES - len(key) // 2 - at) + key
    return json.dumps(data).encode()


class _Body:
    def __init__(self, raw: bytes) -> None:
        self._raw, self._at = raw, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._raw) if size is None or size < 0 else self._at + size
        out, self._at = self._raw[self._at : end], min(end, len(self._raw))
        return out

    def readline(self, size: int = -1) -> bytes:
        return self.read(size)
