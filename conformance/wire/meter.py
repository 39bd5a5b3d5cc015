"""The gate's own token meter: what the gate received, never what the server says of itself.

A server's `usage` is a claim (conformance/README.md, "The token meter"): the meter counts
the tokens an answer shows, and takes the claim only where it is larger.

- A choice that carries `token_ids` or logprob rows (`logprobs.tokens`) shows its tokens
  exactly; with `echo` the rows hold the prompt too, so they count as nothing exact.
- A choice of text alone shows no count: it is charged at its price, the longest sequence
  the request allows (token_cost.CostModel.sequence), which a server that honours max_tokens
  (premise:max_tokens) cannot pass, or at its text's tokens by the model's tokenizer where
  more (`count_text`): a server that runs past max_tokens where its answer shows no count is
  charged for what it wrote. Re-tokenizing a generation's text gives at most a few tokens more
  than were generated (merges across the tokens' seams; measured with the mock at temperature 2:
  5 more at most, at 16 and at 256 tokens), so only text past its price by RETOKENIZE_SLACK
  (`slack`) is evidence of a server that went past max_tokens.
- A stream counts its chunks: each carries at least one token (one with text), or as many
  as its `token_ids` or rows show. It is charged more (`stream_charge`): a chunk without text
  is a token too (an end token under ignore_eos shows none; a bare finish chunk is charged one
  token at most), and a choice that ended with "stop" on a chunk with text one more (the stop
  string's token held back).

`understated` is where an exact count is above the usage's claim: a server's usage that
hides tokens it generated, reported on the check that sent the request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from conformance.wire.sse import Parsed

RETOKENIZE_SLACK = 8  # tokens re-tokenized text may hold beyond those generated, plus 1/8


def slack(price: int) -> int:
    """How far past `price` a text-alone answer's re-tokenized count may go on a server that
    honours max_tokens (RETOKENIZE_SLACK and an eighth of the price: the measured excess is 5)."""
    return RETOKENIZE_SLACK + price // 8


@dataclass(frozen=True)
class Metered:
    tokens: int  # what the meter charges
    exact: int | None  # what the answer shows exactly (None: a choice of text alone)
    claim: int | None  # the usage's completion_tokens (None: none given)
    read: int | None = None  # its choices' tokens: exact, or its text re-tokenized (None: untold)

    @property
    def understated(self) -> bool:
        return self.exact is not None and self.claim is not None and self.claim < self.exact


def shown(item: dict[str, Any], echo: bool) -> int | None:
    """The tokens a choice (or a chunk's choice) shows exactly, or None."""
    ids = item.get("token_ids")
    if isinstance(ids, list):
        return len(ids)
    lp = item.get("logprobs")
    rows = lp.get("tokens") if isinstance(lp, dict) else None
    return len(rows) if isinstance(rows, list) and not echo else None


def _claim(usage: Any) -> int | None:
    value = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def answer(
    data: Any,
    body: Any,
    sequence_price: int,
    worst: int,
    count_text: Callable[[str], int] | None = None,
) -> Metered:
    """A completion without stream: each choice's exact count, or its price (its text's
    tokens by `count_text` where more); an answer without choices (not the API's shape) at the
    request's price."""
    echo = isinstance(body, dict) and bool(body.get("echo"))
    choices = data.get("choices") if isinstance(data, dict) else None
    claim = _claim(data.get("usage") if isinstance(data, dict) else None)
    if not isinstance(choices, list):
        return Metered(max(worst, claim or 0), None, claim)
    counted, exact, read = 0, 0, 0
    all_exact, all_read = True, count_text is not None
    for choice in choices:
        count = shown(choice, echo) if isinstance(choice, dict) else None
        if count is None:
            all_exact = False
            text = choice.get("text") if isinstance(choice, dict) else None
            if count_text is not None and isinstance(text, str) and not echo:
                tokens = count_text(text)
                read += tokens
                counted += max(sequence_price, tokens)
            else:
                all_read = False
                counted += sequence_price
        else:
            exact += count
            read += count
            counted += count
    return Metered(
        max(counted, claim or 0), exact if all_exact else None, claim, read if all_read else None
    )


def _content_choices(parsed: Parsed, body: Any) -> Iterator[tuple[dict[str, Any], int]]:
    """Each choice of a stream's content chunks, with the tokens it shows exactly (0: none)."""
    echo = isinstance(body, dict) and bool(body.get("echo"))
    for event in parsed.events:
        for choice in event.payload.get("choices") or () if event.kind == "content" else ():
            if isinstance(choice, dict):
                yield choice, shown(choice, echo) or 0


def stream_count(parsed: Parsed, body: Any) -> int:
    """The tokens a stream's chunks show: each choice of a content chunk at least one where it
    carries text, or as many as its token ids or rows."""
    return sum(
        max(exact, 1 if isinstance(choice.get("text"), str) and choice["text"] else 0)
        for choice, exact in _content_choices(parsed, body)
    )


def stream_charge(parsed: Parsed, body: Any) -> int:
    """What a stream's chunks are charged (never the evidence of a request past its price): each
    choice of a content chunk at least one token, as many as its token ids or rows show, text or
    not (a token can show no text: an end token under ignore_eos; a bare finish chunk, llama.cpp's
    or LiteLLM's, is charged too, one token a choice at most), and a choice that ended with "stop"
    on a chunk with text one more (the stop string's token held back)."""
    return sum(
        max(exact, 1) + (choice.get("finish_reason") == "stop" and bool(choice.get("text")))
        for choice, exact in _content_choices(parsed, body)
    )


def stream(parsed: Parsed, body: Any) -> Metered:
    """A stream: its chunks' tokens (stream_count), or the usage's claim where larger."""
    claims = [
        c
        for e in parsed.events
        if e.kind in ("content", "usage")
        if (c := _claim(e.payload.get("usage"))) is not None
    ]
    claim = max(claims) if claims else None
    return Metered(max([stream_count(parsed, body)] + claims), None, claim)
