"""Checks registered by name, like schemathesis's `status_code_conformance`.

A check id is `group:name`, stable and readable (`golden:type.max_tokens.string`,
`caps:max_tokens.without_stream.limit+1`, `stream:event_order`). Ids never
depend on the server, so a dry run can list them without a request; the values
a check sends (max_model_len, say) are resolved when it runs.
"""

from __future__ import annotations

import fnmatch
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.engine.config import RunConfig
    from conformance.engine.context import Context
    from conformance.wire.token_cost import CostModel

CheckFunction = Callable[["Context"], None]
# The galleries of wrong deployments a check's `catches` names (each in gallery/): a field's
# effect applied wrongly (wrong.py), a field dropped on half the requests (wrong.py's dropping),
# a field ignored (effects.py).
CATCHES_GALLERIES = ("wrong", "half", "ignored")
TokenBound = int | Callable[["RunConfig"], int]
# The longest silence a check must sit through for its verdict (a keepalive's interval): a
# --timeout shorter than it is a usage error, not the server's finding.
Waits = Callable[["RunConfig"], float] | None
# What a check may cost if the server does NOT conform (accepts what it should refuse,
# ignores a cap), given what the ledger knows of the deployment (its max_model_len).
WorstCase = int | Callable[["RunConfig", "CostModel"], int] | None


@dataclass(frozen=True)
class Check:
    id: str
    func: CheckFunction
    tags: tuple[str, ...] = ()
    doc: str = ""
    tokens: TokenBound = 0  # upper bound of tokens it makes the server generate; 0: none
    shares: str = ""  # checks with the same key share one spend (one stream, one run)
    worst: WorstCase = None  # tokens if the server does not conform; None: the same as `tokens`
    effects: tuple[str, ...] = ()  # request fields whose documented effect it observes (x-effect)
    premise: bool = False  # what the ledger relies on: run first wherever checks may generate
    waits: Waits = None  # the silence its verdict sits through, in seconds (None: none)
    # The wrong deployments it must fail, `gallery:way` (CATCHES_GALLERIES): the tests hold each
    # named way's server to failing it, and a way's failures to the checks that name it.
    catches: tuple[str, ...] = ()

    def silence(self, config: RunConfig) -> float:
        return self.waits(config) if self.waits is not None else 0.0

    def token_bound(self, config: RunConfig) -> int:
        """Tokens a conforming server generates for it (the quick profile keeps those at 0)."""
        return self.tokens(config) if callable(self.tokens) else self.tokens

    def worst_case(self, config: RunConfig, cost: CostModel) -> int:
        """Tokens it may cost against a server that does not conform: what the ledger plans with."""
        if self.worst is None:
            return self.token_bound(config)
        worst = self.worst(config, cost) if callable(self.worst) else self.worst
        return max(worst, self.token_bound(config))

    @property
    def group(self) -> str:
        return self.id.split(":", 1)[0]

    @property
    def all_tags(self) -> tuple[str, ...]:
        """Its own tags plus its group, so `--skip caps` skips every `caps:` check."""
        return self.tags if self.group in self.tags else (self.group, *self.tags)


class Registry:
    """The checks by id. Built on demand: `defer` names the group modules, and the first look at
    the registry (iterating it, its length, its ids) imports them, in the order given, so
    importing the package that defers them loads no check (nor what a group's module brings in,
    schemathesis's hook among them) until a run, a listing or a test asks for them."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}
        self._pending: list[tuple[str, tuple[str, ...]]] = []
        self._lock = threading.RLock()

    def _add(self, check: Check) -> Check:
        strays = [c for c in check.catches if c.split(":", 1)[0] not in CATCHES_GALLERIES]
        if strays:
            raise ValueError(f"{check.id} catches ways of no gallery: {strays}")
        if check.id in self._checks:
            raise ValueError(f"check id registered twice: {check.id}")
        if ":" not in check.id:
            raise ValueError(f"a check id is group:name, not {check.id!r}")
        self._checks[check.id] = check
        return check

    def register(
        self,
        id: str,
        *,
        tags: Iterable[str] = (),
        tokens: TokenBound = 0,
        shares: str = "",
        doc: str = "",
        worst: WorstCase = None,
        effects: Iterable[str] = (),
        premise: bool = False,
        waits: Waits = None,
        catches: Iterable[str] = (),
    ) -> Callable[[CheckFunction], CheckFunction]:
        """The one way a check is registered: a decorator, or called on a function built in a loop
        over data (golden cases, schemathesis's checks). Without `doc`, the function's docstring is
        the check's description (a functools.partial has none of its own)."""

        def wrap(func: CheckFunction) -> CheckFunction:
            own = "" if isinstance(func, functools.partial) else func.__doc__
            self._add(
                Check(
                    id,
                    func,
                    tuple(tags),
                    doc or (own or "").strip(),
                    tokens,
                    shares,
                    worst,
                    tuple(effects),
                    premise,
                    waits,
                    tuple(catches),
                )
            )
            return func

        return wrap

    def catching(self, gallery: str) -> dict[str, set[str]]:
        """Each way of `gallery` a check names in `catches`, with the checks that name it."""
        out: dict[str, set[str]] = {}
        for check in self:
            for name in check.catches:
                kind, _, way = name.partition(":")
                if kind == gallery:
                    out.setdefault(way, set()).add(check.id)
        return out

    def defer(self, package: str, groups: Sequence[str]) -> None:
        """Load `package`'s group modules (`load`) when the registry is first looked at."""
        with self._lock:
            self._pending.append((package, tuple(groups)))

    def load(self, package: str, groups: Sequence[str]) -> None:
        """Import each group's module of `package`, in the order given: the order a run follows.
        A group's module registers its own group's checks and no other's, so the order stated is
        the order run."""
        for group in groups:
            known = len(self._checks)
            import_module(f"{package}.{group}")
            strays = [i for i in list(self._checks)[known:] if not i.startswith(f"{group}:")]
            if strays:
                raise RuntimeError(
                    f"{package}.{group} registered checks of another group: {strays}"
                )

    def _loaded(self) -> dict[str, Check]:
        """The checks, every deferred package's modules imported first (once: a look from a
        module being loaded sees what is registered so far, as an import-time look did)."""
        if self._pending:
            with self._lock:
                order: list[str] = []
                while self._pending:
                    package, groups = self._pending.pop(0)
                    self.load(package, groups)
                    order += groups
                # a group's module imported before the first look (for a constant of its own)
                # registered its checks then: each group in its place, its checks in their order
                rank = {group: i for i, group in enumerate(order)}
                ranked = sorted(self._checks.values(), key=lambda c: rank.get(c.group, len(rank)))
                self._checks = {c.id: c for c in ranked}
        return self._checks

    def __iter__(self) -> Iterator[Check]:
        return iter(self._loaded().values())

    def __len__(self) -> int:
        return len(self._loaded())

    def ids(self) -> list[str]:
        return list(self._loaded())


REGISTRY = Registry()
register = REGISTRY.register


def select(checks: Iterable[Check], config: RunConfig) -> list[Check]:
    """The checks a run executes: profile, then tags (include, skip), then id patterns.

    quick keeps only checks that make the server generate no tokens.
    """
    chosen = []
    for check in checks:
        tags = set(check.all_tags)
        if not config.full and check.token_bound(config) > 0:
            continue
        if config.include and not tags & set(config.include):
            continue
        if tags & set(config.skip):
            continue
        if config.select and not any(fnmatch.fnmatchcase(check.id, p) for p in config.select):
            continue
        if any(fnmatch.fnmatchcase(check.id, p) for p in config.exclude):
            continue
        chosen.append(check)
    return chosen


def unmatched(checks: Iterable[Check], patterns: Iterable[str]) -> list[str]:
    """The patterns that match no check id: a typo, or a shell's `!` taken for a negation."""
    ids = [c.id for c in checks]
    return [p for p in patterns if not any(fnmatch.fnmatchcase(i, p) for i in ids)]


def token_bound(checks: Iterable[Check], config: RunConfig, cost: CostModel | None = None) -> int:
    """Upper bound of the tokens a selection makes the server generate (shared spends once):
    a conforming server's, or, given the ledger's cost model, one that does not conform."""
    shared: dict[str, int] = {}
    total = 0
    for check in checks:
        spend = check.token_bound(config) if cost is None else check.worst_case(config, cost)
        if check.shares:
            shared[check.shares] = max(shared.get(check.shares, 0), spend)
        else:
            total += spend
    return total + sum(shared.values())


def known_tags(checks: Iterable[Check]) -> set[str]:
    return {t for c in checks for t in c.all_tags}
