"""Deployments that apply a field wrongly, now and then, or across requests (issue 30).

`Wrong` is WSGI middleware over the mock: for each valid completion request it may
rewrite what reaches the mock (a proxy that doubles a scale, a vLLM that steers one
layer off) and what comes back (rows one alternative short), on every request or on
the share of them a seeded coin picks (one replica of two wrong). `Leaking` answers a
plain request with the last steered answer of the same prompt, as a prefix cache that
keys blocks without the steering does. `SteersInFlight` steers every request that arrives
while a steered one is in flight, as a batch that shares one steering state does.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from contract import ModelInfo
from contract.tensors import decode_vector, encode_tensor
from gallery import numbers
from gallery.breaker import Breaker
from gallery.effects import _valid, _without
from gallery.support import CONTRACT, Environ, StartResponse, whole_response

App = Callable[[Environ, StartResponse], Iterable[bytes]]
Body = dict[str, Any]
Rewrite = Callable[[Body, ModelInfo], Body]  # a valid request, and the model it names


def _vectors(body: Body, change: Callable[[Body], Body]) -> Body:
    if not isinstance(body.get("apply_steering_vectors"), list):
        return body
    return {
        **body,
        "apply_steering_vectors": [change(dict(v)) for v in body["apply_steering_vectors"]],
    }


def _scaled(k: float) -> Rewrite:
    return lambda body, _: _vectors(
        body, lambda v: {**v, "scale": (1.0 if v.get("scale") is None else v["scale"]) * k}
    )


def _layers_moved(by: int) -> Rewrite:
    def moved(body: Body, model: ModelInfo) -> Body:
        def move(v: Body) -> Body:
            return {
                **v,
                "layer_indices": [
                    min(max(i + by, 0), model.num_layers - 1) for i in v["layer_indices"]
                ],
            }

        return _vectors(body, move)

    return moved


def _decoded(vector: Body, model: ModelInfo) -> np.ndarray:
    """The vector's values, decoded as the API decodes them (the request is valid: checked first)."""
    return decode_vector(vector, model, CONTRACT.api, "apply_steering_vectors").values


def _layers_above(body: Body, model: ModelInfo) -> Body:
    """Each layer's row also added at every layer above it, up to the top (float32 vectors)."""
    vectors = body.get("apply_steering_vectors")
    if not isinstance(vectors, list) or any(
        v["activations"]["dtype"] != "float32" for v in vectors
    ):
        return body
    out = []
    for v in vectors:
        rows = _decoded(v, model)
        for k, at in enumerate(v["layer_indices"]):
            above = list(range(at, model.num_layers))
            tiled = np.repeat(rows[k : k + 1], len(above), axis=0)
            out.append(
                {**v, "layer_indices": above, "activations": encode_tensor(tiled, "torch.float32")}
            )
    return {**body, "apply_steering_vectors": out}


def _prompt_only(body: Body, model: ModelInfo) -> Body:
    """Each vector for every position given as one for the prompt's positions alone."""
    prompt = body.get("prompt")
    if not (isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)):
        return body

    def positional(v: Body) -> Body:
        tensor = v["activations"]
        if (
            v.get("position_indices") is not None
            or tensor["dtype"] != "float32"
            or len(tensor["shape"]) != 2
        ):
            return v
        rows = _decoded(v, model)
        tiled = np.repeat(rows[:, None, :], len(prompt), axis=1)
        return {
            **v,
            "activations": encode_tensor(tiled, "torch.float32"),
            "position_indices": list(range(len(prompt))),
        }

    return _vectors(body, positional)


def _top_k_as_1(body: Body, _: ModelInfo) -> Body:
    return (
        {**body, "top_k": 1} if isinstance(body.get("top_k"), int) and body["top_k"] > 1 else body
    )


def _temperature_clamped(body: Body, _: ModelInfo) -> Body:
    """A proxy that holds temperature to another vendor's range, [0, 1]."""
    t = body.get("temperature")
    return {**body, "temperature": 1.0} if isinstance(t, (int, float)) and t > 1 else body


def _logprobs_capped(body: Body, _: ModelInfo) -> Body:
    """A proxy that holds logprobs to another vendor's most, 5 (OpenAI's)."""
    k = body.get("logprobs")
    return {**body, "logprobs": 5} if isinstance(k, int) and k > 5 else body


def _constant_seed(body: Body, _: ModelInfo) -> Body:
    """The seed asked for replaced by the server's one."""
    return {**body, "seed": 0} if "seed" in body else body


LONG_PROMPT = 16  # characters: past them the server below forgets what bounds an answer


def _long_prompts_unbounded(body: Body, _: ModelInfo) -> Body:
    """For a text prompt over LONG_PROMPT characters: max_tokens, the seed, stop and min_tokens
    not applied (a server tried only with short prompts)."""
    prompt = body.get("prompt")
    if not (isinstance(prompt, str) and len(prompt) > LONG_PROMPT):
        return body
    out = {k: v for k, v in body.items() if k not in ("seed", "stop", "min_tokens")}
    if isinstance(body.get("max_tokens"), int):
        out["max_tokens"] = body["max_tokens"] + 8
    return out


def _cut_at_16(body: Body, _: ModelInfo) -> Body:
    """Every completion cut at 16 tokens (a proxy's own cap)."""
    k = body.get("max_tokens")
    return {**body, "max_tokens": 16} if isinstance(k, int) and k > 16 else body


def _default_16(body: Body, model: ModelInfo) -> Body:
    """max_tokens left out read as 16 (the legacy OpenAI default) where the context holds 16,
    not max_model_len less the prompt."""
    if body.get("max_tokens") is not None:
        return body
    prompt = body.get("prompt")
    ids = isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
    room = model.max_model_len - len(prompt) if ids and isinstance(prompt, list) else 16
    return {**body, "max_tokens": min(16, room)}


def _long_stops_dropped(body: Body, _: ModelInfo) -> Body:
    """Stop strings of more than one character dropped (a server that matches one-character
    stops alone)."""
    stop = body.get("stop")
    if isinstance(stop, str):
        return body if len(stop) <= 1 else _without(body, "stop")
    if isinstance(stop, list):
        return {**body, "stop": [s for s in stop if len(s) <= 1]}
    return body


def _temperature_1_without_top_k(body: Body, _: ModelInfo) -> Body:
    """Sampling at temperature 1 whenever no top_k is set (a server tried with top_k alone)."""
    t, k = body.get("temperature"), body.get("top_k")
    unset = k is None or (isinstance(k, int) and k <= 0)
    return {**body, "temperature": 1.0} if unset and isinstance(t, (int, float)) and t > 0 else body


def _top_p_dropped(body: Body, _: ModelInfo) -> Body:
    """A top_p in [0.01, 1) not applied (a server tried at a tiny top_p alone)."""
    p = body.get("top_p")
    return _without(body, "top_p") if isinstance(p, (int, float)) and 0.01 <= p < 1 else body


def _copied_from_4(sent: Body, data: Body) -> Body:
    """For n of 4 or more, every choice a copy of the first (its index its own)."""
    choices = data.get("choices") or []
    if not (isinstance(sent.get("n"), int) and sent["n"] >= 4 and choices):
        return data
    first = choices[0]
    data["choices"] = [{**json.loads(json.dumps(first)), "index": c["index"]} for c in choices]
    return data


def _rows(cut: Callable[[dict[str, float], str], dict[str, float]]) -> Callable[[Body, Body], Body]:
    def rewrite(sent: Body, data: Body) -> Body:
        for choice in data.get("choices") or []:
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("top_logprobs"), list):
                lp["top_logprobs"] = [
                    cut(row, token) if isinstance(row, dict) else row
                    for row, token in zip(lp["top_logprobs"], lp["tokens"], strict=True)
                ]
        return data

    return rewrite


def _one_short(row: dict[str, float], token: str) -> dict[str, float]:
    """The row less its least likely alternative (not the sampled token)."""
    others = sorted((t for t in row if t != token), key=lambda t: row[t])
    return {t: v for t, v in row.items() if not others or t != others[0]}


def _sampled_only(row: dict[str, float], token: str) -> dict[str, float]:
    return {token: row[token]} if token in row else row


# name -> (request rewrite, response rewrite)
Way = tuple[Rewrite | None, Callable[[Body, Body], Body] | None]
WRONGS: dict[str, Way] = {
    "scale x 2": (_scaled(2.0), None),
    "layer + 1": (_layers_moved(+1), None),
    "layer - 1": (_layers_moved(-1), None),
    "every layer above": (_layers_above, None),
    "prompt only": (_prompt_only, None),
    "constant seed": (_constant_seed, None),
    "rows one short": (None, _rows(_one_short)),
    "rows of the sampled token": (None, _rows(_sampled_only)),
    "any top_k as 1": (_top_k_as_1, None),
    "temperature clamped to 1": (_temperature_clamped, None),
    "logprobs capped at 5": (_logprobs_capped, None),
    "long prompts unbounded": (_long_prompts_unbounded, None),
    "cut at 16": (_cut_at_16, None),
    "default max_tokens 16": (_default_16, None),
    "long stops dropped": (_long_stops_dropped, None),
    "n of 4 or more copied": (None, _copied_from_4),
    "temperature 1 without top_k": (_temperature_1_without_top_k, None),
    "top_p dropped in [0.01, 1)": (_top_p_dropped, None),
    **{name: (None, rewrite) for name, rewrite in numbers.REWRITES.items()},
}


def dropping(field: str) -> Way:
    return (lambda body, _: _without(body, field)), None


class Wrong:
    """The app with one way of being wrong (None: none), on every valid completion request, or
    on a `share` of them by a coin seeded with `seed`. `models` are the app's (the spec's by
    default): what it takes is what it is wrong on."""

    def __init__(self, app: App, models: Mapping[str, ModelInfo] | None = None) -> None:
        self.app = app
        self.models = dict(CONTRACT.api.models if models is None else models)
        self.way: Way | None = None
        self.coin: random.Random | None = None
        self.share = 1.0
        self._lock = threading.Lock()

    def set(self, way: Way | None, *, seed: int | None = None, share: float = 1.0) -> None:
        self.way, self.share = way, share
        self.coin = random.Random(seed) if seed is not None else None

    def _now(self) -> bool:
        if self.coin is None:
            return True
        with self._lock:
            return self.coin.random() < self.share

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        way = self.way
        if (
            way is None
            or environ.get("PATH_INFO") != "/v1/completions"
            or environ.get("REQUEST_METHOD") != "POST"
        ):
            return self.app(environ, start_response)
        sent: Body = {}
        wrong = {"now": False}

        def rewrite(body: Body) -> Body:
            sent.update(body)
            if not _valid(body, self.models) or not self._now():
                return body
            wrong["now"] = True
            return way[0](body, self.models[body["model"]]) if way[0] else body

        Breaker._rewrite_request(environ, rewrite)
        status, headers, body = whole_response(self.app, environ)
        answers = way[1]
        if answers and wrong["now"] and status.startswith("200"):
            streamed = "text/event-stream" in dict(headers).get("Content-Type", "")
            if streamed and isinstance(answers, numbers.Answers) and answers.streams:
                body = answers.stream(sent, body)
            elif not streamed and getattr(answers, "whole", True):
                body = json.dumps(answers(sent, json.loads(body))).encode()
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return [body]


class Leaking:
    """The app behind a cache that keys answers by the request less its steering: a plain
    request (no prompt_logprobs, which runs the whole prompt) last sent steered gets the
    steered answer."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.on = False
        self._steered: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if not self.on or environ.get("PATH_INFO") != "/v1/completions":
            return self.app(environ, start_response)
        sent: Body = {}
        Breaker._rewrite_request(environ, lambda body: sent.update(body) or body)
        if not _valid(sent):
            return self.app(environ, start_response)
        key = json.dumps(
            {k: v for k, v in sent.items() if k != "apply_steering_vectors"}, sort_keys=True
        )
        steered = bool(sent.get("apply_steering_vectors"))
        with self._lock:
            cached = (
                None
                if steered or sent.get("prompt_logprobs") is not None
                else self._steered.get(key)
            )
        if cached is not None:
            start_response(
                "200 OK",
                [("Content-Type", "application/json"), ("Content-Length", str(len(cached)))],
            )
            return [cached]
        status, headers, body = whole_response(self.app, environ)
        if steered and status.startswith("200"):
            with self._lock:
                self._steered[key] = body
        start_response(status, headers)
        return [body]


def paced(chunks: Iterable[bytes], step_s: float, leave: Callable[[], None]) -> Iterator[bytes]:
    """The chunks, one a step_s; `leave` is called once, when the last chunk is made and before
    it is written (the client may send its next request as soon as it reads it), or when the
    answer is closed early."""
    left = False

    def once() -> None:
        nonlocal left
        if not left:
            left = True
            leave()

    try:
        it = iter(chunks)
        chunk = next(it, None)
        while chunk is not None:
            time.sleep(step_s)
            following = next(it, None)
            if following is None:
                once()
            yield chunk
            chunk = following
    finally:
        once()
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


class SteersInFlight:
    """The app behind an engine whose batch shares one steering state: every request that
    arrives while a steered one is in flight is steered by its vectors too. Steered answers come
    at a GPU's pace (STEP_S a chunk), so that a request can arrive beside one; the rest as the
    mock answers them."""

    STEP_S = 0.01

    def __init__(self, app: App) -> None:
        self.app = app
        self._in_flight: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/v1/completions" or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        sent: Body = {}

        def rewrite(body: Body) -> Body:
            sent.update(body)
            with self._lock:
                beside = self._in_flight[-1] if self._in_flight else None
            if beside is None or not _valid(body) or body.get("apply_steering_vectors"):
                return body
            return {**body, "apply_steering_vectors": beside}

        Breaker._rewrite_request(environ, rewrite)
        vectors = sent.get("apply_steering_vectors") if _valid(sent) else None
        if not vectors:
            return self.app(environ, start_response)
        with self._lock:
            self._in_flight.append(vectors)
        return paced(self.app(environ, start_response), self.STEP_S, lambda: self._leave(vectors))

    def _leave(self, vectors: Any) -> None:
        with self._lock:
            self._in_flight.remove(vectors)


class LooseInFlight:
    """A server that, while a stream is in flight, answers a request without stream with the
    seed dropped and max_tokens 8 past what was asked (a batch that loses a request's sampling
    settings when it is not alone); streams paced as SteersInFlight paces them."""

    STEP_S = 0.01

    def __init__(self, app: App) -> None:
        self.app = app
        self.streams = 0
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/v1/completions" or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        sent: Body = {}

        def rewrite(body: Body) -> Body:
            sent.update(body)
            with self._lock:
                busy = self.streams > 0
            if not busy or not _valid(body) or body.get("stream"):
                return body
            out = _without(body, "seed")
            if isinstance(body.get("max_tokens"), int):
                out["max_tokens"] = body["max_tokens"] + 8
            return out

        Breaker._rewrite_request(environ, rewrite)
        if not (_valid(sent) and sent.get("stream")):
            return self.app(environ, start_response)
        with self._lock:
            self.streams += 1
        return paced(self.app(environ, start_response), self.STEP_S, self._leave)

    def _leave(self) -> None:
        with self._lock:
            self.streams -= 1
