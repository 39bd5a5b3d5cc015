"""The fake engine: deterministic text, logprobs and activations without a GPU.

Every random draw comes from a stream seeded by a SHA-256 digest
of what decides the output (model, prompt tokens, sampling fields, seed,
choice number; steering vectors replace tokens after, steered.py), never
Python's hash(), so a seeded or
temperature-0 request gives the same answer on every call and after a
restart. Without a seed at a temperature above 0, fresh entropy joins the
digest and the answer varies, as in vLLM.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np

from api_server.engine import Activations, ChoiceDelta, Engine, Event, LogprobsDelta, Usage
from contract import CompletionRequest, ModelInfo, Spec
from contract.tokens import decode
from mock_server.activations import capture, warm
from mock_server.logprobs import GREEDY, LEAST_TOP, Cut, Ranked, max_top, prompt_logprob, rank_positions, row_width, top_logprobs
from mock_server.sampler import Choice, Settings, sample_choice
from mock_server.steered import additions, steerer
from mock_server.vocab import Vocab, vocab

# Fields that change which tokens a model samples; stream, logprobs, echo etc. do not.
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty",
                   "frequency_penalty", "repetition_penalty", "allowed_token_ids", "bad_words")


# json.dumps(parts, sort_keys=True, default=str), without building an encoder per call.
_SEED_JSON = json.JSONEncoder(sort_keys=True, default=str)


def _seed(*parts: Any) -> int:
    digest = hashlib.sha256(_SEED_JSON.encode(parts).encode()).digest()
    return int.from_bytes(digest, "little")


def _rng(*parts: Any) -> np.random.Generator:
    """For the wide draws of logprobs (rows of uniforms at once)."""
    return np.random.Generator(np.random.PCG64(_seed(*parts)))


def _is_greedy(req: CompletionRequest, greedy_below: float) -> bool:
    """Whether sampling keeps only the likeliest token: a temperature below the spec's
    threshold, top_k 1, min_p 1, or a top_p the likeliest token always fills (logprobs.py)."""
    return (req.option("temperature") < greedy_below or req.option("top_k") == 1
            or req.option("min_p") >= 1 or req.option("top_p") <= LEAST_TOP)


class FakeEngine(Engine):
    """The engine protocol (api_server/engine.py) over the model's real vocabulary. Its
    events never wait (the mock's simulated latency wraps it: faults.Simulated), so its
    stream runs in the request's own thread or greenlet."""

    never_waits = True

    def __init__(self, api: Spec, models: Iterable[ModelInfo] = (), eos_rate: float = 1 / 64) -> None:
        self.eos_rate = eos_rate
        self.greedy_below = api.greedy_below
        self.wire_dtypes = api.wire_dtypes
        self.row_width = row_width(max_top(api))
        for model in models:   # build the tables at start, not in the first request
            vocab(model)
            warm(model, self.wire_dtypes[model.dtype])

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        body, model = req.body, req.model
        voc = vocab(model)
        skip = req.option("skip_special_tokens")
        settings = Settings(
            max_tokens=req.max_tokens, min_tokens=req.option("min_tokens"),
            eos_token_id=None if req.option("ignore_eos") else model.eos_token_ids[0],
            stop_token_ids=tuple(body.get("stop_token_ids", ())),
            stop=(body["stop"],) if isinstance(body.get("stop"), str) else tuple(body.get("stop", ())),
            include_stop_str_in_output=req.option("include_stop_str_in_output"),
            skip_special_tokens=skip, allowed_token_ids=tuple(body.get("allowed_token_ids", ())),
            bad_words=frozenset(w.strip() for w in body.get("bad_words", ())), eos_rate=self.eos_rate)
        greedy = _is_greedy(req, self.greedy_below)
        # Steering is no part of the seed (the [] is where it was, so that every answer stays
        # as it was): a vector that adds nothing leaves the text as it is without it, and
        # steered.py replaces the tokens a vector's push reaches.
        common = [model.name, {k: body[k] for k in SAMPLING_FIELDS if k in body}, [],
                  None if greedy else body.get("seed", os.urandom(16).hex())]
        n = req.n
        # Without stream nobody sees the pieces: each choice is one delta holding all its
        # tokens (the app merges deltas, so the Completion is the same).
        whole = not req.stream
        deltas: list[Iterator[ChoiceDelta]] = []   # one per choice, in index order
        choices: list[Choice] = []
        for p, prompt in enumerate(req.prompts):
            text = req.prompt_texts[p] if req.prompt_texts else None
            for j in range(n):
                key = [*common, prompt, j]
                # (the key in JSON only with steering: ~3 us a choice without it)
                steer = steerer(req.steering, model, len(prompt), req.max_tokens,
                                _SEED_JSON.encode(key).encode()) if req.steering else None
                # Python's Mersenne Twister: cheap to seed, and its random() for an int seed
                # is the same in every Python version, so answers survive upgrades too.
                choice = sample_choice(voc, random.Random(_seed("tokens", key)).random, settings, steer)
                choices.append(choice)
                deltas.append(_choice_deltas(req, voc, p * n + j, prompt, text, choice, key, greedy,
                                              self.row_width, whole))
        if len(deltas) == 1:
            yield from deltas[0]
        # Choices advance together, one token each per step, as in a batch.
        while len(deltas) > 1:
            alive = []
            for it in deltas:
                delta = next(it, None)
                if delta is not None:
                    alive.append(it)
                    yield delta
            deltas = alive
            if len(deltas) == 1:
                yield from deltas[0]
        yield Usage(sum(req.prompt_token_counts), sum(len(c.token_ids) for c in choices))
        if req.layers:
            generated = choices[0].token_ids
            layers = sorted(req.layers)   # ascending, as vllm-lens returns them; rows follow
            steered = ([layer for v in req.steering for layer in v.layer_indices],
                       lambda layer, residual: additions(req.steering, layer, residual)) if req.steering else None
            yield Activations(layers, capture(model, self.wire_dtypes[model.dtype], layers,
                                              req.prompts[0] + generated[:-1], steered))


@dataclass
class _Echo:
    """What the prompt adds to a choice's first delta: the echoed text and its
    logprobs' rows, and the fields vLLM sends once (prompt ids, prompt_logprobs)."""
    on: bool                      # the request asked for echo
    text: str
    texts: list[str]
    ranked: list[Ranked]
    extra: dict[str, Any]


def _echo(req: CompletionRequest, voc: Vocab, prompt: list[int], prompt_text: str | None,
          width: int) -> _Echo:
    body = req.body
    k = body.get("logprobs")
    echo = bool(body.get("echo"))
    ranked: list[Ranked] = []
    if (echo and k is not None) or "prompt_logprobs" in body:
        # A prompt's logprobs depend on the prompt alone, so echo and prompt_logprobs agree.
        shown = max(k or 0, body.get("prompt_logprobs", 0))
        rows = _rng("prompt", req.model.name, prompt).random((len(prompt), width))
        ranked = rank_positions(rows, prompt, shown, Cut(), voc.words)
    texts = [voc.texts[t] for t in prompt] if echo else []
    # A string prompt is echoed as sent; token ids as vLLM decodes them (special tokens kept).
    text = "" if not echo else (prompt_text if prompt_text is not None else decode(req.model, prompt))
    extra: dict[str, Any] = {}
    if body.get("return_token_ids"):
        extra["prompt_token_ids"] = list(prompt)
    if "prompt_logprobs" in body:
        top = body["prompt_logprobs"]
        extra["prompt_logprobs"] = [None] + [prompt_logprob(_trim(r, top), voc) for r in ranked[1:]]
    return _Echo(echo, text, texts, ranked, extra)


def _choice_deltas(req: CompletionRequest, voc: Vocab, index: int, prompt: list[int],
                   prompt_text: str | None, choice: Choice, key: list[Any],
                   greedy: bool, width: int, whole: bool = False) -> Iterator[ChoiceDelta]:
    """The choice's deltas: one per token, or with `whole` one holding every token;
    `width` is a logprobs row's (logprobs.row_width)."""
    k = req.body.get("logprobs")
    ids = choice.token_ids
    if not ids:
        return
    head = _echo(req, voc, prompt, prompt_text, width)
    # Logprobs write each token as its own text, special tokens included, and text_offset
    # is the running sum of those texts' lengths, the echoed prompt's first (as vLLM 0.32
    # writes them); the choice's text leaves special tokens out when skip_special_tokens says so.
    gen: LogprobsDelta | None = None
    if k is not None:
        rows = _rng("logprobs", key).random((len(ids), width))
        cut = GREEDY if greedy else Cut(req.option("top_k"), req.option("min_p"), req.option("top_p"),
                                            req.option("temperature"))
        ranked = rank_positions(rows, ids, k, cut, voc.words)
        tokens = [voc.texts[t] for t in ids]
        offsets = list(accumulate(map(len, tokens), initial=sum(map(len, head.texts))))
        gen = LogprobsDelta(tokens, [r.logprob for r in ranked],
                            [top_logprobs(r, voc) for r in ranked], offsets[:-1])

    def first_logprobs(lp: LogprobsDelta) -> LogprobsDelta:
        return _with_echo(lp, head.texts, head.ranked[:len(prompt)], k, voc) if head.on else lp  # type: ignore[arg-type]

    if whole:
        logprobs = first_logprobs(gen) if gen is not None else None
        yield ChoiceDelta(index, head.text + choice.text, list(ids), logprobs,
                          choice.finish_reason, choice.stop_reason, **head.extra)
        return
    yield from _token_deltas(index, choice, head, gen, first_logprobs)


def _token_deltas(index: int, choice: Choice, head: _Echo, gen: LogprobsDelta | None,
                  first_logprobs: Callable[[LogprobsDelta], LogprobsDelta]) -> Iterator[ChoiceDelta]:
    """One delta per token; the first carries the echo, the last the finish reason."""
    ids = choice.token_ids
    logprobs: LogprobsDelta | None = None
    cuts = list(accumulate((len(t) for t in choice.token_texts), initial=0))   # where each token's text starts
    full = choice.text
    size = len(full)
    last = len(ids) - 1
    for i, token in enumerate(ids):
        start = cuts[i] if cuts[i] < size else size
        if i < last:
            end = cuts[i + 1] if cuts[i + 1] < size else size
            text = full[start:end]
        else:
            text = full[start:]
        if gen is not None:
            logprobs = LogprobsDelta(gen.tokens[i:i + 1], gen.token_logprobs[i:i + 1],
                                     gen.top_logprobs[i:i + 1], gen.text_offset[i:i + 1])
        if i == 0:
            if head.on:
                text = head.text + text
                if logprobs is not None:
                    logprobs = first_logprobs(logprobs)
            yield ChoiceDelta(index, text, [token], logprobs,
                              choice.finish_reason if i == last else None,
                              choice.stop_reason if i == last else None, **head.extra)
        elif i < last:
            yield ChoiceDelta(index, text, [token], logprobs)
        else:
            yield ChoiceDelta(index, text, [token], logprobs, choice.finish_reason, choice.stop_reason)


def _trim(r: Ranked, k: int) -> Ranked:
    """The same position showing only the k best alternatives."""
    return Ranked(r.token_id, r.logprob, r.rank, [a for a in r.alternatives if a[2] <= k])


def _with_echo(lp: LogprobsDelta, texts: list[str], ranked: list[Ranked], k: int,
               voc: Vocab) -> LogprobsDelta:
    """The prompt's tokens first; the first has no logprob (nothing comes before it)."""
    offsets = list(accumulate((len(t) for t in texts), initial=0))[:-1]
    return LogprobsDelta(
        texts + lp.tokens,
        [None] + [r.logprob for r in ranked[1:]] + lp.token_logprobs,
        [None] + [top_logprobs(_trim(r, k), voc) for r in ranked[1:]] + lp.top_logprobs,
        offsets + lp.text_offset)
