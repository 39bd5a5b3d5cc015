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
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import numpy as np
import zstandard

from contract.tensors import encode_tensor

Body = dict[str, Any]


def _prompt_lengths(sent: Body, choices: int) -> list[int]:
    """Each choice's prompt length, where the prompts were sent as token ids (else 0)."""
    prompt = sent.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        lengths = [len(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        lengths = [len(p) for p in prompt]
    else:
        return [0] * choices
    per = max(1, choices // len(lengths))
    return [lengths[min(i // per, len(lengths) - 1)] for i in range(choices)]


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
    for choice, n in zip(choices, _prompt_lengths(sent, len(choices)), strict=True):
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and n >= 3:
            for key in ("token_logprobs", "top_logprobs"):
                lp[key] = _late(lp[key], 1, n)
    return data


def rows_other_position(sent: Body, data: Body) -> Body:
    choices = data.get("choices") or []
    lengths = _prompt_lengths(sent, len(choices)) if sent.get("echo") else [0] * len(choices)
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
    for choice, n in zip(choices, _prompt_lengths(sent, len(choices)), strict=True):
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and n >= 2 and isinstance(lp["top_logprobs"][n - 1], dict):
            row = lp["top_logprobs"][n - 1]
            best = max(row.values())
            token = lp["tokens"][n - 1]
            lp["token_logprobs"][n - 1] = best
            row[token] = best
    return data


REWRITES = {
    "prompt_logprobs one early": prompt_logprobs_early,
    "echo one late": echo_late,
    "generated rows shifted": rows_other_position,
    "layers reversed": layers_reversed,
    "capture sees later tokens": capture_sees_later,
    "choices copied": choices_copied,
    "continuations the likeliest": continuations_likeliest,
}
