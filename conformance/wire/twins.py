"""Counted twins: a plain answer (text alone, no count) held to the same request with its token ids.

The meter charges a choice of text alone at its price (conformance.wire.meter), which a server
that honours max_tokens cannot pass; one that ignores max_tokens only where its answer shows no
count would pass it unseen. So, for plain answers of deterministic requests (greedy, or seeded)
chosen at random from the run's seed (`share` of them; the server answered before it could know
which), the client sends the twin: the same request with `return_token_ids`. A twin that stopped
for length at max_tokens tokens, whose text the plain answer's text runs on past, shows the plain
answer generated past max_tokens: a finding of the check that sent it (`outrun`), and the ledger
halts (nothing whose price relies on max_tokens is sent any more).

A twin's text is bound to its token ids: it must be the start of what they decode to (`decode`,
the model's tokenizer), or the twin is a finding of the check (`unbound`): a server that answers
the twin with honest ids and the plain answer's long text shows nothing by its count.

Sized (`SHARE`): a server that runs past max_tokens on every plain answer has each caught with odds
SHARE, so it passes a run of N such answers with odds (1 - SHARE)^N: 0.5^7 < 1% at N = 7 (a full
run against the mock has 68); and it gets (1 - SHARE) / SHARE = 1 such answer past the meter, on
average, before it is caught. A plain answer of a request that is neither greedy nor seeded has no
twin to be held to (two samples differ): what it generated past max_tokens is the gap the meter
cannot see, as a stream's after the suite closed it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from conformance.wire import meter
from conformance.wire.exchange import Exchange
from conformance.wire.ledger import Ledger
from conformance.wire.token_cost import lax_int


class Answer(Protocol):
    """What a twin reads of an answer (wire.client.Reply)."""

    exchange: Exchange
    status: int | None
    data: Any


class Sender(Protocol):
    """What sends a twin (wire.client.Client, which holds the Twins: no import back)."""

    ledger: Ledger

    def twin(self, path: str, body: dict[str, Any]) -> Answer | None: ...


SHARE = 0.5  # of the eligible plain answers twinned
COUNTED = "return_token_ids"  # the field that makes an answer show its tokens


@dataclass(frozen=True)
class Unbound:
    """A counted twin whose text is not what its token ids decode to: its count tells nothing of
    the text it came with (a server that answers the twin with honest ids and another text)."""

    exchange: Exchange  # the plain answer's (its check's finding)
    index: int  # the choice
    ids: int
    text_chars: int


@dataclass(frozen=True)
class Outrun:
    """A plain answer whose text runs past its counted twin's max_tokens tokens."""

    exchange: Exchange
    max_tokens: int
    index: int  # the choice
    twin_chars: int
    plain_chars: int


class Twins:
    """Chooses plain answers to twin and judges them; safe to share between threads."""

    def __init__(
        self,
        seed: int,
        greedy_below: float,
        share: float = SHARE,
        decode: Callable[[list[int]], tuple[str, str]] | None = None,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.greedy_below, self.share = greedy_below, share
        # ids -> (their text without special tokens, with them): what binds a twin's text
        self.decode, self.count_text = decode, count_text
        self.eligible = self.sent = 0
        self.outrun: list[Outrun] = []
        self.unbound: list[Unbound] = []

    def _bound(self, ids: Any, text: Any) -> bool:
        """Whether a twin's text is what its ids decode to: the start of it (a stop string cuts
        the text, not the ids; a character cut in two waits for its next token), or past it by no
        more than re-tokenizing's slack (meter.slack: a text one token past its ids is a finding
        of the ids, return_token_ids's, not of the text's length)."""
        if self.decode is None or not isinstance(ids, list) or not isinstance(text, str):
            return True
        if not all(type(i) is int and i >= 0 for i in ids):
            return False
        try:
            plain, special = self.decode(ids)
        except (KeyError, ValueError, OverflowError):  # an id the tokenizer does not have
            return False
        for decoded in (plain, special):
            if decoded.startswith(text):
                return True
            past = text[len(decoded) :] if text.startswith(decoded) else None
            count = self.count_text
            if past is not None and count is not None and count(past) <= meter.slack(len(ids)):
                return True
        return False

    def _eligible(self, body: Any, reply: Answer) -> bool:
        if not isinstance(body, dict) or body.get("stream") or body.get(COUNTED):
            return False
        if lax_int(body.get("max_tokens")) is None or not isinstance(reply.data, dict):
            return False
        temperature = body.get("temperature", 1.0)
        greedy = isinstance(temperature, (int, float)) and temperature < self.greedy_below
        if not (greedy or type(body.get("seed")) is int):
            return False
        choices = reply.data.get("choices")
        echo = bool(body.get("echo"))
        return isinstance(choices, list) and any(
            isinstance(c, dict) and meter.shown(c, echo) is None for c in choices
        )

    def hold(self, client: Sender, path: str, body: Any, reply: Answer) -> None:
        """`reply` (a 200 to `body`, sent without stream to a generating `path`), twinned at
        random when it is eligible."""
        if not self._eligible(body, reply):
            return
        with self._lock:
            self.eligible += 1
            chosen = self._rng.random() < self.share
            self.sent += chosen
        if not chosen:
            return
        twin = client.twin(path, {**body, COUNTED: True})
        if twin is None or twin.status != 200 or not isinstance(twin.data, dict):
            return
        limit = lax_int(body["max_tokens"]) or 0
        plain = {c.get("index"): c for c in reply.data["choices"] if isinstance(c, dict)}
        for c in twin.data.get("choices") or []:
            found = isinstance(c, dict) and plain.get(c.get("index"))
            if not found:
                continue
            ids, text, said = c.get("token_ids"), c.get("text"), found.get("text")
            if not body.get("echo") and not self._bound(ids, text):
                with self._lock:
                    self.unbound.append(
                        Unbound(reply.exchange, c["index"], len(ids), len(str(text)))
                    )
                continue
            if (
                c.get("finish_reason") == "length"
                and isinstance(ids, list)
                and len(ids) == limit
                and isinstance(text, str)
                and isinstance(said, str)
                and len(said) > len(text)
                and said.startswith(text)
            ):
                with self._lock:
                    self.outrun.append(
                        Outrun(reply.exchange, limit, c["index"], len(text), len(said))
                    )
                client.ledger.halt(
                    f"a plain answer ran past max_tokens {limit} (its counted twin stopped there): "
                    "a request's price cannot be bounded, so none that could generate is sent"
                )

    def summary(self) -> dict[str, Any]:
        return {"share": self.share, "eligible": self.eligible, "sent": self.sent}
