"""For the effects: checks' tests: deployments that ignore one field, and one under batch effects.

`Ignoring` is the deployment of issue 22: its API layer validates a request
exactly as openapi.yaml says and then leaves one field out of what it passes
on (a proxy that forgets it, a vLLM without vllm-lens). `Batched` is a
conforming deployment under other traffic, as the documentation allows: every
log probability and captured value moved by a little, and now and then a
greedy token flipped where two were almost equally likely.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import zstandard

from conformance.checks import REGISTRY
from contract import ApiError
from contract.spec import ModelInfo
from gallery.breaker import Breaker
from gallery.support import CONTRACT, Environ, StartResponse, whole_response

App = Callable[[Environ, StartResponse], Iterable[bytes]]


def _without(body: dict[str, Any], field: str) -> dict[str, Any]:
    """The body less `field`; `apply_steering_vectors.<name>` leaves it out of every vector."""
    top, _, inner = field.partition(".")
    if not inner:
        return {k: v for k, v in body.items() if k != field}
    if not isinstance(body.get(top), list):
        return body
    return {**body, top: [{k: v for k, v in vec.items() if k != inner} for vec in body[top]]}


def _greedy_always(body: dict[str, Any]) -> dict[str, Any]:
    """A deployment that samples at temperature 0 whatever the request says."""
    return {**body, "temperature": 0} if body.get("n") in (None, 1) else body


# The fields an effects check observes: each one a way to be broken (Ignoring drops it).
IGNORABLE = tuple(sorted({f for c in REGISTRY if c.group == "effects" for f in c.effects}))


class Ignoring:
    """WSGI middleware: the app, with `field` dropped from every valid completion request
    (None: untouched); `greedy` samples every one-choice request at temperature 0 instead."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.field: str | None = None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        field = self.field
        if field is not None and environ.get("PATH_INFO") == "/v1/completions":
            rewrite = _greedy_always if field == "greedy" else (lambda body: _without(body, field))
            Breaker._rewrite_request(environ, lambda body: _if_valid(body, rewrite(body)))
        return self.app(environ, start_response)


def _if_valid(body: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    """`changed` where the API takes `body`; a body the rewrite left alone is not validated
    (most are: a steering vector's validation is most of a request's cost here)."""
    return changed if changed != body and _valid(body) else body


def _valid(body: dict[str, Any], models: Mapping[str, ModelInfo] | None = None) -> bool:
    """Whether the API takes `body` (over `models`: the spec's by default)."""
    try:
        json.dumps(body, allow_nan=False)  # the API's JSON has no NaN (Python's parser takes it)
        CONTRACT.validate_completion(body, models)
    except (ApiError, ValueError):
        return False
    return True


# -- batch effects ------------------------------------------------------------------------

LOGPROB_NOISE = 2e-4  # nats
STREAM_NOISE = 0.004  # a captured value's share (about one bf16 step)
FLIP_EVERY = 3  # one greedy text in this many gets a flipped token


class Batched:
    """WSGI middleware over the app: each success body as a batch would move it."""

    def __init__(self, app: App, seed: int = 0) -> None:
        self.app = app
        self.random = random.Random(seed)
        self.greedy = itertools.count(1)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/v1/completions" or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        sent: dict[str, Any] = {}

        def keep(body: dict[str, Any]) -> dict[str, Any]:
            sent.update(body)
            return body

        Breaker._rewrite_request(environ, keep)
        if sent.get("stream"):  # a stream passes as it comes (its timing is what same_batch reads)
            return self.app(environ, start_response)
        status, headers, body = whole_response(self.app, environ)
        if status.startswith("200") and not sent.get("stream"):
            body = json.dumps(self._move(sent, json.loads(body))).encode()
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return [body]

    def _move(self, sent: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        # a flip needs a near tie: none where allowed_token_ids leaves one choice at a step,
        # and one seen only with logprobs rows of two tokens or more
        greedy = sent.get("temperature") == 0 or sent.get("top_k") == 1
        for choice in data.get("choices") or []:
            lp = choice.get("logprobs")
            if not isinstance(lp, dict):
                continue
            if greedy and "allowed_token_ids" not in sent and (sent.get("logprobs") or 0) >= 2:
                self._near_tie(choice, lp, flip=next(self.greedy) % FLIP_EVERY == 0)
            self._logprobs(lp)
        acts = data.get("activations")
        if isinstance(acts, dict):
            acts["residual_stream"] = self._stream(acts["residual_stream"])
        return data

    @staticmethod
    def _near_tie(choice: dict[str, Any], lp: dict[str, Any], flip: bool) -> None:
        """The last token and the runner-up of its row a hair apart (the model's near tie, in
        every answer alike); `flip`: the batch moved both by less than x-batch-effects allows,
        so the runner-up is the token now."""
        i = len(lp["tokens"]) - 1
        row, token = lp["top_logprobs"][i], lp["tokens"][i]
        others = sorted((t for t in row if t != token), key=row.get, reverse=True)
        if not others or not choice["text"].endswith(token):
            return
        gap = CONTRACT.api.batch_effects["logprob_nats"] / 4
        runner_up = others[0]
        row[runner_up] = row[token] + (gap if flip else -gap)
        if flip:
            lp["tokens"][i] = runner_up
            lp["token_logprobs"][i] = row[runner_up]
            choice["text"] = choice["text"][: len(choice["text"]) - len(token)] + runner_up

    def _logprobs(self, lp: dict[str, Any]) -> None:
        """Every value a little lower; the sampled token's as its row's entry."""
        for i, row in enumerate(lp.get("top_logprobs") or []):
            if not isinstance(row, dict):
                continue
            for key in row:
                row[key] -= self.random.uniform(0, LOGPROB_NOISE)
            token = lp["tokens"][i]
            lp["token_logprobs"][i] = row.get(token, lp["token_logprobs"][i] - LOGPROB_NOISE)

    def _stream(self, tensor: dict[str, Any]) -> dict[str, Any]:
        raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(tensor["data"]))
        bits = np.frombuffer(raw, dtype="<i2").astype(np.uint16).astype(np.uint32) << 16
        values = bits.view(np.float32)
        rng = np.random.default_rng(self.random.getrandbits(32))
        moved = values * (1 + rng.uniform(-STREAM_NOISE, STREAM_NOISE, values.shape)).astype(
            np.float32
        )
        out = (moved.view(np.uint32) >> 16).astype(np.uint16).astype("<i2")
        frame = zstandard.ZstdCompressor(write_content_size=True).compress(out.tobytes())
        return {**tensor, "data": base64.b64encode(frame).decode()}
