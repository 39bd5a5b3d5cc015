"""The fake engine: deterministic text, logprobs and activations without a GPU.

One small causal model (model.py) decides every number: a generated token is drawn from the
distribution of its prefix, and the logprobs of an echoed prompt, of prompt_logprobs and of a
generation read the same distributions. Draws come from a stream seeded as vLLM seeds a
request: a choice of a seeded request with `n` > 1 is seeded `seed + index`, as vLLM's parallel
sampling seeds its children (so choice j of seed s is choice 0 of seed s + j), and every prompt
of a request gets the same seed. Without a seed at a temperature above 0, fresh entropy seeds
it and the answer varies, as in vLLM; greedy draws nothing.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from api_server.engine import Activations, ChoiceDelta, Engine, Event, LogprobsDelta, Usage
from contract import CompletionRequest, ModelInfo, Spec
from contract.tokens import decode
from mock_server.engine.activations import capture, warm
from mock_server.engine.logprobs import Ranked, prompt_logprob, ranked, top_logprobs, trim
from mock_server.engine.model import CausalModel
from mock_server.engine.plan import Output, Plan, plan_request
from mock_server.engine.sampler import Choice, sample_choice
from mock_server.engine.steered import Steer, additions, steerer
from mock_server.engine.vocab import Vocab, vocab

_MODELS: dict[tuple[str, int, float], CausalModel] = {}


def causal_model(model: ModelInfo, eos_rate: float) -> CausalModel:
    """The model's distributions, built once per process (and end-of-text rate)."""
    key = (model.hf_id, model.vocab_size, eos_rate)
    built = _MODELS.get(key)
    if built is None:
        built = _MODELS.setdefault(key, CausalModel(model, vocab(model), eos_rate))
    return built


class FakeEngine(Engine):
    """The engine protocol (api_server/engine.py) over the model's real vocabulary. Its
    events never wait (the mock's simulated latency wraps it: faults.Simulated), so its
    stream runs in the request's own thread or greenlet."""

    never_waits = True

    def __init__(
        self, api: Spec, models: Iterable[ModelInfo] = (), eos_rate: float = 1 / 64
    ) -> None:
        self.eos_rate = eos_rate
        self.greedy_below = api.greedy_below
        self.wire_dtypes = api.wire_dtypes
        for model in models:  # build the tables at start, not in the first request
            causal_model(model, eos_rate)
            warm(model, self.wire_dtypes[model.dtype])

    def plan(self, req: CompletionRequest) -> Plan:
        """What the engine does with the request, decided once (plan.py)."""
        return plan_request(req, self.greedy_below)

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        yield from self.run(self.plan(req))

    def run(self, plan: Plan) -> Iterator[Event]:
        """The plan's events: its choices' deltas, its usage, its capture."""
        model, settings, seed, n = plan.model, plan.settings, plan.seed, plan.n
        cm = causal_model(model, self.eos_rate)
        # Without stream nobody sees the pieces: each choice is one delta holding all its
        # tokens (the app merges deltas, so the Completion is the same).
        whole = not plan.stream
        deltas: list[Iterator[ChoiceDelta]] = []  # one per choice, in index order
        choices: list[Choice] = []
        for p, prompt in enumerate(plan.prompts):
            text = plan.prompt_texts[p] if plan.prompt_texts else None
            steer = (
                steerer(plan.steering, model, len(prompt) + settings.max_tokens)
                if plan.steering
                else None
            )
            head = _echo(plan, cm, prompt, text, steer)
            for j in range(n):
                # vLLM's children: seed + index; unseeded, fresh entropy. A greedy choice draws
                # none: no generator is seeded for it (the process's, should one be drawn)
                draw = (
                    random.random
                    if settings.greedy
                    else random.Random(seed + j if seed is not None else os.urandom(16)).random
                )
                at = None if steer is None else _generation_steps(steer, len(prompt))
                choice = sample_choice(cm, prompt, draw, settings, at)
                choices.append(choice)
                deltas.append(_choice_deltas(plan.output, cm, p * n + j, head, choice, whole))
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
        yield Usage(sum(plan.prompt_token_counts), sum(len(c.token_ids) for c in choices))
        if plan.layers:
            generated = choices[0].token_ids
            layers = sorted(plan.layers)  # ascending, as vllm-lens returns them; rows follow
            vectors = plan.steering
            steered = (
                (
                    [layer for v in vectors for layer in v.layer_indices],
                    lambda layer, residual: additions(vectors, layer, residual),
                )
                if vectors
                else None
            )
            yield Activations(
                layers,
                capture(
                    model,
                    self.wire_dtypes[model.dtype],
                    layers,
                    plan.prompts[0] + generated[:-1],
                    steered,
                ),
            )


def _generation_steps(steer: Steer, prompt_len: int) -> Callable[[int, int], int]:
    """Generated token i is written from position prompt_len - 1 + i."""
    return lambda i, key: steer(prompt_len - 1 + i, key)


@dataclass
class _Echo:
    """What the prompt adds to a choice's first delta: the echoed text and its
    logprobs' rows, and the fields vLLM sends once (prompt ids, prompt_logprobs)."""

    on: bool  # the request asked for echo
    text: str
    texts: list[str]
    ranked: list[Ranked]
    extra: dict[str, Any]


def _prompt_rows(cm: CausalModel, prompt: list[int], top: int, steer: Steer | None) -> list[Ranked]:
    """Each prompt token's row but the first's (nothing comes before it): token i read at the
    position of prompt[:i], as a generation after prompt[:i] reads its first token."""
    keys = cm.keys(prompt)
    rows = []
    for i in range(1, len(prompt)):
        key = keys[i] if steer is None else steer(i - 1, keys[i])
        rows.append(ranked(cm, key, cm.class_of(prompt[i - 1]), prompt[i], top))
    return rows


def _echo(
    plan: Plan,
    cm: CausalModel,
    prompt: list[int],
    prompt_text: str | None,
    steer: Steer | None,
) -> _Echo:
    out = plan.output
    shown = out.prompt_rows
    rows = [] if shown is None else _prompt_rows(cm, prompt, shown, steer)
    voc = cm.vocab
    texts = [voc.texts[t] for t in prompt] if out.echo else []
    # A string prompt is echoed as sent; token ids as vLLM decodes them (special tokens kept).
    text = (
        ""
        if not out.echo
        else (prompt_text if prompt_text is not None else decode(plan.model, prompt))
    )
    extra: dict[str, Any] = {}
    if out.token_ids:
        extra["prompt_token_ids"] = list(prompt)
    if out.prompt_logprobs is not None:
        top = out.prompt_logprobs
        extra["prompt_logprobs"] = [None] + [prompt_logprob(trim(r, top), voc) for r in rows]
    return _Echo(out.echo, text, texts, rows, extra)


def _choice_deltas(
    out: Output,
    cm: CausalModel,
    index: int,
    head: _Echo,
    choice: Choice,
    whole: bool = False,
) -> Iterator[ChoiceDelta]:
    """The choice's deltas: one per token, or with `whole` one holding every token."""
    k = out.logprobs
    ids = choice.token_ids
    if not ids:
        return
    voc = cm.vocab
    # Logprobs write each token as its own text, special tokens included, and text_offset
    # is the running sum of those texts' lengths, the echoed prompt's first (as vLLM 0.32
    # writes them); the choice's text leaves special tokens out when skip_special_tokens says so.
    gen: LogprobsDelta | None = None
    if k is not None:
        rows = [
            ranked(cm, key, cls, token, k)
            for key, cls, token in zip(choice.keys, choice.classes, ids, strict=True)
        ]
        tokens = [voc.texts[t] for t in ids]
        offsets = list(accumulate(map(len, tokens), initial=sum(map(len, head.texts))))
        gen = LogprobsDelta(
            tokens,
            [r.logprob for r in rows],
            [top_logprobs(r, voc) for r in rows],
            offsets[:-1],
        )

    def first_logprobs(lp: LogprobsDelta) -> LogprobsDelta:
        return _with_echo(lp, head.texts, head.ranked, k, voc) if head.on else lp  # type: ignore[arg-type]

    if whole:
        logprobs = first_logprobs(gen) if gen is not None else None
        yield ChoiceDelta(
            index,
            head.text + choice.text,
            list(ids),
            logprobs,
            choice.finish_reason,
            choice.stop_reason,
            **head.extra,
        )
        return
    yield from _token_deltas(index, choice, head, gen, first_logprobs)


def _token_deltas(
    index: int,
    choice: Choice,
    head: _Echo,
    gen: LogprobsDelta | None,
    first_logprobs: Callable[[LogprobsDelta], LogprobsDelta],
) -> Iterator[ChoiceDelta]:
    """One delta per token; the first carries the echo, the last the finish reason."""
    ids = choice.token_ids
    logprobs: LogprobsDelta | None = None
    cuts = list(
        accumulate((len(t) for t in choice.token_texts), initial=0)
    )  # where each token's text starts
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
            logprobs = LogprobsDelta(
                gen.tokens[i : i + 1],
                gen.token_logprobs[i : i + 1],
                gen.top_logprobs[i : i + 1],
                gen.text_offset[i : i + 1],
            )
        if i == 0:
            if head.on:
                text = head.text + text
                if logprobs is not None:
                    logprobs = first_logprobs(logprobs)
            yield ChoiceDelta(
                index,
                text,
                [token],
                logprobs,
                choice.finish_reason if i == last else None,
                choice.stop_reason if i == last else None,
                **head.extra,
            )
        elif i < last:
            yield ChoiceDelta(index, text, [token], logprobs)
        else:
            yield ChoiceDelta(
                index, text, [token], logprobs, choice.finish_reason, choice.stop_reason
            )


def _with_echo(
    lp: LogprobsDelta, texts: list[str], ranked: list[Ranked], k: int, voc: Vocab
) -> LogprobsDelta:
    """The prompt's tokens first; the first has no logprob (nothing comes before it)."""
    offsets = list(accumulate((len(t) for t in texts), initial=0))[:-1]
    return LogprobsDelta(
        texts + lp.tokens,
        [None] + [r.logprob for r in ranked] + lp.token_logprobs,
        [None] + [top_logprobs(trim(r, k), voc) for r in ranked] + lp.top_logprobs,
        offsets + lp.text_offset,
    )
