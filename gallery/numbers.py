"""Deployments whose numbers are not one model's (issue 43): each a rewrite of the mock's whole
answer the way an off-by-one or a shortcut in a real server gets it wrong, for the model: group
(conformance/checks/model.py). Registered in wrong.py's WRONGS as response rewrites, so `Wrong`
serves them like any other way of being wrong.

    prompt_logprobs one early   entry i holds entry i + 1's row (the last repeated)
    echo one late                an echoed prompt's rows move one position on (values and tops)
    generated rows shifted       each generated row is the one of the position before it
    layers reversed              a capture's layers come back in reverse (its `layers` still ascending)
    capture sees later tokens    a position's residual row holds part of the next one's
    choices copied               one sample, copied to every choice of `n`
    continuations the likeliest  an echoed prompt's last token scored as its row's likeliest
                                 (each continuation lm-eval scores takes most of the probability)

The logprobs rewrites are served in streams alike (`Answers`); "echo one late, in streams only"
is right in whole bodies and wrong in streams.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import zstandard

from contract.tensors import encode_tensor

Body = dict[str, Any]


def _covering(prompt: str, choice: Body) -> int:
    """How many echoed tokens (a leading BOS, whose text is special, among them) spell `prompt`."""
    tokens = (choice.get("logprobs") or {}).get("tokens") or []
    text = ""
    for i, token in enumerate(tokens):
        if not (i == 0 and token.startswith("<|")):
            text += token
        if len(text) >= len(prompt):
            return i + 1
    return 0


def _prompt_lengths(sent: Body, choices: list[Body]) -> list[int]:
    """Each choice's prompt length: the ids sent, or for a text prompt with echo, the echoed
    tokens that spell it (else 0)."""
    prompt = sent.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        lengths = [len(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        lengths = [len(p) for p in prompt]
    elif isinstance(prompt, str) and sent.get("echo"):
        return [_covering(prompt, c) for c in choices]
    else:
        return [0] * len(choices)
    per = max(1, len(choices) // len(lengths))
    return [lengths[min(i // per, len(lengths) - 1)] for i in range(len(choices))]


def prompt_logprobs_early(sent: Body, data: Body) -> Body:
    for choice in data.get("choices") or []:
        entries = choice.get("prompt_logprobs")
        if isinstance(entries, list) and len(entries) >= 3:
            choice["prompt_logprobs"] = [None, *entries[2:], entries[-1]]
    return data


def _late(values: list[Any], start: int, end: int) -> list[Any]:
    """values[start:end] moved one position on (the first repeated)."""
    return [*values[:start], values[start], *values[start : end - 1], *values[end:]]


def echo_late(sent: Body, data: Body) -> Body:
    if not sent.get("echo"):
        return data
    choices = data.get("choices") or []
    for choice, n in zip(choices, _prompt_lengths(sent, choices), strict=True):
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and n >= 3:
            for key in ("token_logprobs", "top_logprobs"):
                lp[key] = _late(lp[key], 1, n)
    return data


def rows_other_position(sent: Body, data: Body) -> Body:
    choices = data.get("choices") or []
    lengths = _prompt_lengths(sent, choices) if sent.get("echo") else [0] * len(choices)
    for choice, n in zip(choices, lengths, strict=True):
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and len(lp.get("token_logprobs") or []) - n >= 2:
            for key in ("token_logprobs", "top_logprobs"):
                lp[key] = _late(lp[key], n, len(lp[key]))
    return data


def _floats(tensor: Body) -> np.ndarray:
    raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(tensor["data"]))
    if tensor["dtype"] == "int16":  # bf16 bits
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(tensor["shape"])
    return np.frombuffer(raw, dtype="<" + np.dtype(tensor["dtype"]).str[1:]).reshape(
        tensor["shape"]
    )


def _encoded(values: np.ndarray, tensor: Body) -> Body:
    if tensor["dtype"] == "int16":
        bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return encode_tensor(bits.view(np.int16), tensor["original_dtype"])
    return encode_tensor(values.astype(tensor["dtype"]), tensor["original_dtype"])


def _residual(change: Any) -> Any:
    def rewrite(sent: Body, data: Body) -> Body:
        acts = data.get("activations")
        if isinstance(acts, dict) and isinstance(acts.get("residual_stream"), dict):
            tensor = acts["residual_stream"]
            acts["residual_stream"] = _encoded(change(_floats(tensor).copy()), tensor)
        return data

    return rewrite


def _peek(values: np.ndarray) -> np.ndarray:
    values[:, :-1] += 0.5 * values[:, 1:]
    return values


layers_reversed = _residual(lambda values: values[::-1])
capture_sees_later = _residual(_peek)


def choices_copied(sent: Body, data: Body) -> Body:
    choices = data.get("choices") or []
    if len(choices) > 1 and (sent.get("n") or 1) > 1:
        n = sent["n"]
        for i, choice in enumerate(choices):
            first = choices[i - i % n]
            if choice is not first:
                index = choice.get("index")
                choice.clear()
                choice.update(copy.deepcopy(first))
                choice["index"] = index
    return data


def continuations_likeliest(sent: Body, data: Body) -> Body:
    if not sent.get("echo"):
        return data
    choices = data.get("choices") or []
    for choice, n in zip(choices, _prompt_lengths(sent, choices), strict=True):
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and n >= 2 and isinstance(lp["top_logprobs"][n - 1], dict):
            row = lp["top_logprobs"][n - 1]
            best = max(row.values())
            token = lp["tokens"][n - 1]
            lp["token_logprobs"][n - 1] = best
            row[token] = best
    return data


class Answers:
    """A rewrite of a whole answer's choices, served on whole bodies (`whole`) and on streams
    (`streams`: each choice's logprobs joined across its chunks, rewritten as a whole choice's,
    and given back chunk by chunk, as many values to each chunk as it had)."""

    LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")

    def __init__(
        self, rewrite: Callable[[Body, Body], Body], *, whole: bool = True, streams: bool = True
    ) -> None:
        self.rewrite, self.whole, self.streams = rewrite, whole, streams

    def __call__(self, sent: Body, data: Body) -> Body:
        return self.rewrite(sent, data)

    def stream(self, sent: Body, raw: bytes) -> bytes:
        events = raw.split(b"\n\n")
        payloads: list[Body | None] = []
        for event in events:
            data = event[len(b"data: ") :] if event.startswith(b"data: {") else None
            payloads.append(json.loads(data) if data else None)
        joined: dict[int, Body] = {}
        for payload in payloads:
            for c in (payload or {}).get("choices") or []:
                lp = c.get("logprobs")
                if isinstance(lp, dict):
                    into = joined.setdefault(
                        c["index"], {"index": c["index"], "logprobs": {k: [] for k in self.LISTS}}
                    )
                    for k in self.LISTS:
                        into["logprobs"][k] += lp.get(k) or []
        if not joined:
            return raw
        self.rewrite(sent, {"choices": [joined[i] for i in sorted(joined)]})
        taken = dict.fromkeys(joined, 0)
        out = []
        for event, payload in zip(events, payloads, strict=True):
            if payload is None:
                out.append(event)
                continue
            for c in payload.get("choices") or []:
                lp = c.get("logprobs")
                if isinstance(lp, dict):
                    n, at = len(lp.get("tokens") or []), taken[c["index"]]
                    for k in self.LISTS:
                        lp[k] = joined[c["index"]]["logprobs"][k][at : at + n]
                    taken[c["index"]] = at + n
            out.append(b"data: " + json.dumps(payload).encode())
        return b"\n\n".join(out)


REWRITES = {
    "prompt_logprobs one early": Answers(prompt_logprobs_early),  # never streamed (refused)
    "echo one late": Answers(echo_late),
    "echo one late, in streams only": Answers(echo_late, whole=False),
    "generated rows shifted": Answers(rows_other_position),
    "layers reversed": Answers(layers_reversed, streams=False),
    "capture sees later tokens": Answers(capture_sees_later, streams=False),
    "choices copied": Answers(choices_copied, streams=False),
    "continuations the likeliest": Answers(continuations_likeliest),
}
