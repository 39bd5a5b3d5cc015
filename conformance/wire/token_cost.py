"""What one request may cost if the server does NOT conform: its worst case in generated tokens.

The suite plans its token ceiling with this, not with what a conforming server
would do: a server that wrongly accepts a request the contract refuses
generates for it, and one that ignores `max_tokens`'s absence generates up to
its max_model_len. The bound assumes only what no server can escape: at most
prompts x n sequences (best_of, if larger), each at most `max_tokens` long when
the request sets it and at most the context (max_model_len less the prompt's
token ids) in any case. Fields a lax server would coerce ("4", 4.0, true) are
read as it would read them, and a length it cannot read as a positive number (0,
-1, null, 1.5, "x") as no length at all: its whole context; `stop` and the like are not trusted to shorten
anything, and `allowed_token_ids` set to the model's end tokens (the suite's way
to make a request that must be accepted cheap) only once the server has shown
that it stops there (`end_tokens_honoured`, one probe of the full profile).

Only POST to a path of the spec with a JSON request body can generate (the chat
route included: a server that serves chat generates for it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import Any

from contract import Spec


@dataclass(frozen=True)
class TokenFields:
    """The fields that multiply the generated sequences and those that bound each one, the
    API's and the lax servers' (openapi.yaml's x-kind tokens, x-lax-fields): read the way a lax
    server reads them."""

    sequences: tuple[str, ...]
    lengths: tuple[str, ...]

    @classmethod
    def of(cls, api: Spec) -> TokenFields:
        return cls(api.token_fields("sequences"), api.token_fields("length"))


def cheapest(api: Spec) -> dict[str, int]:
    """Each of the API's own fields that bound or multiply the generated tokens, at 1 (max_tokens
    1, n 1): what makes a request as cheap as it can be."""
    return dict.fromkeys(
        (*api.request_fields("tokens", "length"), *api.request_fields("tokens", "sequences")), 1
    )


@cache
def generating_paths(api: Spec) -> frozenset[str]:
    """Paths of `api` whose POST takes a JSON body: the only requests that can make a server generate."""
    out = set()
    for route in api.routes:
        if route.method == "POST" and route.has_body:
            content = (api.operation(route.operation_id).get("requestBody") or {}).get(
                "content", {}
            )
            if "application/json" in content:
                out.add(route.path)
    return frozenset(out)


def lax_int(value: Any) -> int | None:
    """The integer a lax (pydantic-style) server would read from `value`, or None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return int(number) if number.is_integer() else None
    return None


def _prompts(body: dict[str, Any]) -> tuple[int, int]:
    """(number of prompts, token ids in the shortest prompt when known, else 0)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (list, str)) for p in prompt):
        known = [len(p) for p in prompt if isinstance(p, list)]
        return len(prompt), min(known) if len(known) == len(prompt) else 0
    if isinstance(prompt, list) and all(map(isinstance, prompt, repeat(int))):
        return 1, len(prompt)
    return 1, 0


def _prompt_ids(body: dict[str, Any]) -> int:
    """The token ids of the prompts given as ids, all together (an id may be written 790.0: a
    JSON integer to the contract)."""
    prompt = body.get("prompt")
    if not isinstance(prompt, list):
        return 0
    if not any(isinstance(p, (list, str)) for p in prompt):
        return len(prompt)
    return sum(len(p) for p in prompt if isinstance(p, list))


def _sequences(body: dict[str, Any], fields: TokenFields) -> int:
    """The sequences a body asks of each prompt (n, best_of: the largest), read as a lax server may."""
    return max([1] + [v for v in (lax_int(body.get(f)) for f in fields.sequences) if v is not None])


def _length(body: dict[str, Any], fields: TokenFields) -> int | float:
    """The longest sequence the length fields allow, read as a lax server may: one it cannot
    read as a positive integer (0, negative, null, a fraction, a word) bounds nothing, as
    llama.cpp reads 0 as "until the context ends"; none at all bounds nothing either."""
    lengths = [lax_int(body[f]) for f in fields.lengths if f in body]
    if not lengths or any(v is None or v < 1 for v in lengths):
        return float("inf")
    return max(v for v in lengths if v is not None)


def _stops_at_once(body: dict[str, Any], end_tokens: frozenset[int]) -> bool:
    allowed = body.get("allowed_token_ids")
    return (
        bool(end_tokens)
        and isinstance(allowed, list)
        and bool(allowed)
        and all(isinstance(t, int) and t in end_tokens for t in allowed)
        and not body.get("ignore_eos")
        and (lax_int(body.get("min_tokens")) or 0) <= 1
    )


def _json(body: Any) -> Any:
    """A body as JSON, or None: not JSON, or nested past what Python's decoder will hold (a
    hostile body the suite sends on purpose; no server generates for it)."""
    if isinstance(body, (bytes, str)):
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None
    return body


def sequence_bound(
    body: Any, max_model_len: int, fields: TokenFields, end_tokens: frozenset[int] = frozenset()
) -> int:
    """The longest sequence a server that ignores every rule but max_tokens and its context
    may write for this JSON body."""
    body = _json(body)
    if not isinstance(body, dict):
        return 0
    context = max(max_model_len - _prompts(body)[1], 0)
    per_sequence = min(_length(body, fields), context)
    if _stops_at_once(body, end_tokens):
        per_sequence = min(per_sequence, 1)
    return int(max(per_sequence, 0))


def worst_case(
    body: Any, max_model_len: int, fields: TokenFields, end_tokens: frozenset[int] = frozenset()
) -> int:
    """Tokens a server that ignores every rule may generate for this JSON body."""
    body = _json(body)
    if not isinstance(body, dict):
        return 0
    prompts, _ = _prompts(body)
    return (
        prompts * _sequences(body, fields) * sequence_bound(body, max_model_len, fields, end_tokens)
    )


@dataclass(frozen=True)
class CostModel:
    """What the ledger knows of the deployment: its max_model_len (GET /v1/models), the paths
    that can generate (the spec's: generating_paths), and the end tokens it has shown it stops
    at when they are the only allowed_token_ids."""

    max_model_len: int
    generating: frozenset[str]
    fields: TokenFields
    end_tokens: frozenset[int] = frozenset()

    @classmethod
    def of(cls, api: Spec, max_model_len: int) -> CostModel:
        """The cost model of a deployment of `api` with this max_model_len."""
        return cls(max_model_len, generating_paths(api), TokenFields.of(api))

    def body(self, body: Any) -> int:
        """Worst case of a JSON body sent to a generating route."""
        return worst_case(body, self.max_model_len, self.fields, self.end_tokens)

    def stops_at_once(self, body: Any) -> bool:
        """Whether the body allows only the end tokens the server has shown it stops at: each
        sequence one token, which may show no text (an end token's)."""
        body = _json(body)
        return isinstance(body, dict) and _stops_at_once(body, self.end_tokens)

    def sequence(self, body: Any) -> int:
        """The longest one sequence of a JSON body may be: a choice's price."""
        return sequence_bound(body, self.max_model_len, self.fields, self.end_tokens)

    def prompt_text(self, body: Any) -> int:
        """The most tokens of prompt text a choice's text may carry without echo: the prompts
        given as token ids, once per sequence. vLLM 0.32's detokenizer writes a prompt's whole
        text before the first generated token when the prompt's ids end inside a character (a
        lone byte token): 4 tokens generated, 120 in the text of a 117-token prompt. Text prompts
        are whole characters, so none of theirs comes back."""
        body = _json(body)
        if not isinstance(body, dict):
            return 0
        return _prompt_ids(body) * _sequences(body, self.fields)

    def request(
        self,
        method: str,
        path: str,
        body: Any,
        stop_after_events: int | None = None,
        early_close: int = 0,
    ) -> int:
        """Worst case of one request (0 if it cannot generate); a stream the suite closes after
        `stop_after_events` events costs at most `early_close`."""
        if method.upper() != "POST" or path.split("?", 1)[0] not in self.generating:
            return 0
        worst = self.body(body)
        return min(worst, early_close) if stop_after_events is not None else worst
