"""Deployments whose /metrics is wrong the way real ones are: the mock with its scrape
rewritten (a family renamed, a label dropped, a family missing, buckets fixed, a stale page).
tests/conformance/test_metrics_contract.py holds metrics:* to failing each."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from gallery.support import Environ, StartResponse, whole_response
from mock_server import MockConfig, create_app
from mock_server.testing import served as serve

Change = Callable[[str], str]


class Scraped:
    """The mock with its /metrics text rewritten by `change` (None: as it is)."""

    def __init__(self, change: Change | None = None) -> None:
        self.app, self.change = create_app(MockConfig()), change

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        status, headers, body = whole_response(self.app, environ)
        if environ.get("PATH_INFO") == "/metrics" and self.change is not None:
            body = self.change(body.decode()).encode()
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [
                ("Content-Length", str(len(body)))
            ]
        start_response(status, headers)
        return [body]


@contextmanager
def scraped(change: Change | None = None) -> Iterator[str]:
    """The mock, its /metrics rewritten by `change`, served; yields its URL."""
    with serve(Scraped(change)) as url:
        yield url


def without(family: str) -> Change:
    """A deployment that does not export `family` (an older vLLM, a hand-made exporter)."""
    suffix = "(_total|_created|_bucket|_sum|_count)?"
    pattern = re.compile(rf"^(# (HELP|TYPE) )?{re.escape(family)}{suffix}[{{ ].*\n", re.M)
    return lambda text: pattern.sub("", text)


def renamed(old: str, new: str) -> Change:
    return lambda text: text.replace(old, new)


def unlabelled(label: str) -> Change:
    """Every series without `label` (a relabelling rule that drops it)."""
    return lambda text: re.sub(rf',?{label}="[^"]*"', "", text)


def fixed_buckets(family: str, top: float) -> Change:
    """`family`'s buckets cut at `top` (an exporter that copied one vLLM's buckets for every
    max_model_len)."""
    pattern = re.compile(rf'^{re.escape(family)}_bucket{{.*le="([0-9.e+]+)".*\n', re.M)
    return lambda text: pattern.sub(lambda m: m[0] if float(m[1]) <= top else "", text)


def frozen() -> Change:
    """A /metrics that always answers its first scrape (a cache in front, a stale exporter)."""
    first: list[str] = []

    def change(text: str) -> str:
        first[:] = first or [text]
        return first[0]

    return change
