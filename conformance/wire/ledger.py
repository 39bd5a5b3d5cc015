"""The gate's token ledger: every token a run makes the server generate, counted by the gate's
own meter (conformance.wire.meter: what an answer shows; its usage a claim), and every
request priced before it is sent.

With a ceiling and a cost model set (the runner sets both once it knows the deployment), a
request whose worst case (the server does not conform) would take the count past the ceiling
is not sent (OverCeiling). A request past its price breaks the bound every price relies on: a
finding of the check that sent it, and from then on every request is priced by the largest
overshoot seen (`Overshoot`: its ratio and its excess, with OVERSHOOT_MARGIN), so a server that
overshoots (llama.cpp's 2 tokens for max_tokens 1) is still checked within the ceiling; an answer
past even that price halts the ledger, and nothing that could generate is sent any more (Halted). Every sender
answers to it: the client (conformance.wire.client), the raw sockets (checks/robust/raw.py)
and schemathesis's session (checks/schema.py, through `charge`).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conformance.wire import jsontext, meter
from conformance.wire.exchange import Exchange
from conformance.wire.sse import Parsed, parse_lines
from conformance.wire.token_cost import CostModel

# The start of the reason of every check skipped for the token ceiling (reports find them by it).
# Above this many tokens, a check that only needs to see a request accepted makes
# it cheap (closes a stream after its first chunk, or lets it stop at once).
CHEAP_TOKENS = 16
OVER_CEILING = "over the token ceiling"


def may_have_generated(status: int | None) -> bool:
    """Whether an answer of `status` may come after the server generated: a 429 or a 5xx may
    (a rate limit or a failure after the work; the gate cannot tell), a 4xx refusal may not."""
    return status is not None and (status == 429 or status >= 500)


class OverCeiling(Exception):
    """A request was not sent: if the server did not conform, it could pass the token ceiling.
    `worst`: the tokens it (or what it stands for) may cost."""

    def __init__(self, message: str, worst: int) -> None:
        super().__init__(message)
        self.worst = worst


class Halted(OverCeiling):
    """A request was not sent: the ledger is halted (Ledger.halt), whatever the ceiling."""


@dataclass(frozen=True)
class Overspend:
    """A request that generated more than the ledger priced it at: the server went past a
    bound the price assumed (max_tokens, max_model_len, n); the check that sent it is told."""

    exchange: Exchange | None
    priced: int
    spent: int


OVERSHOOT_MARGIN = 0.25  # a later request's price: its own x the largest ratio seen x (1 + this)


@dataclass(frozen=True)
class Overshoot:
    """The most an answer went past what its request allowed: later prices are inflated by it."""

    ratio: float  # spent / allowed
    excess: int  # spent - allowed

    def price(self, allowed: int) -> int:
        """What a request allowed `allowed` tokens may cost from a server that overshoots so."""
        if not allowed:
            return 0
        return math.ceil(allowed * self.ratio * (1 + OVERSHOOT_MARGIN)) + self.excess

    @classmethod
    def of(cls, allowed: int, spent: int) -> Overshoot:
        return cls(spent / max(allowed, 1), max(spent - allowed, 0))


class Ledger:
    """The count, the ceiling and the prices of one run; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tokens = 0  # generated tokens, by the gate's own meter
        # with both set, a request that could take `tokens` past `ceiling` is not sent
        self.ceiling: int | None = None
        self.cost: CostModel | None = None
        self.overspends: list[Overspend] = []
        self.understated: list[Overspend] = []  # usage below what the answer shows
        self.overclaimed: list[Overspend] = []  # usage past what the request allows
        # Why nothing that could generate is sent any more (a premise failed, a request went past
        # its price): no request whose price relies on what the server has shown false.
        self.halted: str | None = None
        # the first answer past what its request allowed: every later price is inflated by it
        self.overshoot: Overshoot | None = None
        # a text's tokens by the model's tokenizer (the runner sets it): a plain answer's count
        self.count_text: Callable[[str], int] | None = None

    def priced(self, allowed: int) -> int:
        """A request's price: what it allows, inflated by an overshoot seen (Overshoot)."""
        return allowed if self.overshoot is None else self.overshoot.price(allowed)

    def add(self, n: int) -> None:
        with self._lock:
            self.tokens += n

    def worst_case(
        self, method: str, path: str, content: bytes | None, stop_after_events: int | None = None
    ) -> int:
        """What this request may cost if the server does not conform (0 before connect)."""
        if self.cost is None or content is None:
            return 0
        # a stream the suite closes early costs what arrives before it hangs up
        return self.cost.request(method, path, content, stop_after_events, CHEAP_TOKENS)

    def halt(self, reason: str) -> None:
        """Send nothing that could generate from now on (OverCeiling with `reason`)."""
        with self._lock:
            self.halted = self.halted or reason

    def not_halted_raw(self, request: bytes) -> None:
        """Halted, for raw bytes a halted client may not send: a POST to a path that can generate,
        whatever its body (a hostile or framed body has no price to read)."""
        method, _, rest = request.partition(b" ")
        path = rest.partition(b" ")[0].decode("latin-1").split("?", 1)[0]
        if (
            self.halted
            and self.cost is not None
            and method == b"POST"
            and path in self.cost.generating
        ):
            raise Halted(f"a raw POST {path} was not sent: {self.halted}", 0)

    def not_halted(
        self, method: str, path: str, content: bytes | None, stop_after_events: int | None = None
    ) -> int:
        """The request's worst case, or Halted if it could generate and the client is halted."""
        worst = self.worst_case(method, path, content, stop_after_events)
        if worst and self.halted:
            raise Halted(f"{method} {path} was not sent: {self.halted}", worst)
        return worst

    def reserve(
        self, method: str, path: str, content: bytes | None, stop_after_events: int | None = None
    ) -> int:
        """The request's worst case, or OverCeiling if it could take the count past the ceiling
        or the client is halted."""
        worst = self.not_halted(method, path, content, stop_after_events)
        need = self.priced(worst)
        if self.ceiling is not None and need and self.tokens + need > self.ceiling:
            raise OverCeiling(
                f"{method} {path} was not sent: it may generate {need} tokens if the "
                f"server does not conform"
                + (" (priced by the overshoot seen)" if need != worst else "")
                + f"; {self.tokens} of the ceiling of {self.ceiling} are spent",
                need,
            )
        return worst

    def _body(self, content: bytes | None) -> Any:
        try:
            return json.loads(content) if content else None
        except (ValueError, RecursionError):
            return None

    def count(
        self, data: Any, content: bytes | None, worst: int, exchange: Exchange | None
    ) -> None:
        """A 200 without stream, by the gate's meter (conformance.wire.meter.answer)."""
        body = self._body(content)
        price = self.cost.sequence(body) if self.cost is not None else worst
        metered = meter.answer(data, body, price, worst, self.count_text)
        self._claimed(metered.claim, body, exchange)
        echoed = self.cost.prompt_text(body) if self.cost is not None else 0
        self._spend(metered, worst, exchange, echoed)

    def count_stream(
        self,
        parsed: Parsed,
        content: bytes | None,
        worst: int,
        exchange: Exchange | None,
        unfinished: bool = False,
    ) -> None:
        """A stream's chunks (conformance.wire.meter.stream); one unfinished (broken, or closed early
        by the suite) at its price too: the server may write on until it sees the close. Charged by
        meter.stream_charge (a chunk without text a token too); as evidence of a request past its
        price, a chunk without text (llama.cpp's last "" with its finish_reason, LiteLLM's finish
        chunk) is no token."""
        body = self._body(content)
        metered = meter.stream(parsed, body)
        self._claimed(metered.claim, body, exchange)
        charged = max(metered.tokens, meter.stream_charge(parsed, body))
        self.add(max(charged, self.priced(worst) if unfinished else 0))
        # past its price by evidence: the chunks, and the usage's claim too where there is one (a
        # proxy may cut one token's text in two chunks; a usage may claim what never came)
        counted = meter.stream_count(parsed, body)
        said = counted if metered.claim is None else min(metered.claim, counted)
        if self.cost is not None and said > worst:
            with self._lock:
                self._overspent(Overspend(exchange, worst, said))

    def _claimed(self, claim: int | None, body: Any, exchange: Exchange | None) -> None:
        """A usage past all the request allows (its prompts x n x max_tokens within max_model_len):
        the server went past max_tokens, or its usage is false; a finding of the check that sent
        it either way, and the ledger halts (a count it claims is charged: a claim the server
        chose must not decide the run's verdict by the ceiling alone)."""
        if self.cost is None or claim is None:
            return
        allowed = self.cost.body(body)
        if claim > allowed:
            with self._lock:
                self.overclaimed.append(Overspend(exchange, allowed, claim))
                self._past(
                    allowed,
                    claim,
                    f"the server's usage claims {claim} tokens for a request that allows {allowed}",
                )

    def _overspent(self, overspend: Overspend) -> None:
        """A request past its price: a finding of its check, and the prices inflated by it, or a
        halt past an inflated price (held: the lock)."""
        self.overspends.append(overspend)
        self._past(
            overspend.priced,
            overspend.spent,
            f"the server generated {overspend.spent} tokens for a request priced at {overspend.priced}",
        )

    def _past(self, allowed: int, spent: int, what: str) -> None:
        """An answer past what its request allows (held: the lock): the first sets the overshoot
        that prices every later request; one past that price halts the ledger."""
        if self.overshoot is None:
            self.overshoot = Overshoot.of(allowed, spent)
        elif spent > self.overshoot.price(allowed):
            self.halted = self.halted or (
                f"{what}, past even the price the overshoot seen before gives it "
                f"({self.overshoot.price(allowed)}): a request's price cannot be bounded, so none "
                "that could generate is sent"
            )

    def _spend(
        self, metered: meter.Metered, priced: int, exchange: Exchange | None, echoed: int = 0
    ) -> None:
        """Count what the meter says; past `priced` by the answer's exact count an Overspend, usage
        below it an understatement (each a finding of the check that sent it). A claim alone
        proves no overspend: the meter charges it, and one past all the request allows is
        `_claimed`'s. Re-tokenized text is evidence only past the slack and the prompt text
        (`echoed`: CostModel.prompt_text) a conforming server may write into it."""
        self.add(metered.tokens)
        shown = metered.exact or 0
        # text alone, re-tokenized: evidence only past the slack re-tokenizing needs
        read = metered.read if metered.exact is None and metered.read is not None else 0
        with self._lock:
            if self.cost is not None and shown > priced:
                self._overspent(Overspend(exchange, priced, shown))
            elif self.cost is not None and read > priced + meter.slack(priced) + echoed:
                self._overspent(Overspend(exchange, priced, read))
            if metered.understated:
                self.understated.append(Overspend(exchange, metered.claim or 0, metered.exact or 0))

    def charge(
        self,
        method: str,
        path: str,
        sent: bytes | None,
        status: int | None,
        answer: bytes,
        unfinished: bool = False,
    ) -> None:
        """An answer got through another sender (schemathesis's session), by the same meter: no
        answer at the request's price, a 200 by what it shows (JSON or a stream; `unfinished`, a
        stream read in part, at its price too)."""
        worst = self.worst_case(method, path, sent)
        if status is None or may_have_generated(status):
            self.add(self.priced(worst))
        elif status == 200:
            try:
                data: Any = jsontext.loads(answer)
            except (ValueError, RecursionError):
                text = answer.decode("utf-8", "replace").splitlines()
                self.count_stream(
                    parse_lines([(0.0, line) for line in text]), sent, worst, None, unfinished
                )
            else:
                self.count(data, sent, worst, None)
