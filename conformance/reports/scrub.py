"""Secrets out of everything the suite writes: the one place a report, a body file, a curl line
or a terminal line leaves the process (`Scrubber.write`, `Scrubber.console`).

A key reaches a report in many forms: the header the suite sent under any scheme (`Token KEY`,
`Basic base64(user:KEY)`), a server's error message quoting it, a JSON string escaping it, a
URL encoding it. Each form a server may plausibly echo is replaced by MASK: the key as it is,
JSON-escaped, URL-encoded, HTML-escaped, and inside base64 at each of its three alignments (a key
base64-encoded inside a longer string only shows its middle, in one of three shapes), standard
and URL-safe alphabets.

A key shorter than MIN_SECRET characters cannot be told from the words around it and is not
scrubbed (a one-letter test key would mask every letter like it); the CLI's keys are real ones.
"""
from __future__ import annotations

import base64
import html
import io
import json
import re
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, cast

from rich.console import Console

from conformance.engine.config import url_secrets
from conformance.engine.results import MASKED as MASK, MIN_SECRET


def _base64_cores(secret: bytes) -> set[str]:
    """What base64 of any string that holds `secret` shows of it: at each alignment, the
    characters that depend on the secret's bytes alone."""
    cores = set()
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + secret).decode()
        start = -(-pad * 4 // 3)                # characters that hold the padding's bits
        end = (pad + len(secret)) * 4 // 3       # the last character that holds only the secret's bits
        core = encoded[start:end]
        if len(core) >= MIN_SECRET:
            cores.add(core)
            cores.add(core.translate(str.maketrans("+/", "-_")))
    return cores


def forms(secret: str) -> set[str]:
    """Every form of `secret` that the scrubber masks."""
    if len(secret) < MIN_SECRET:
        return set()
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
            urllib.parse.quote(secret, safe=""), html.escape(secret), urllib.parse.quote_plus(secret),
            *_base64_cores(secret.encode())}


class Scrubber:
    """Masks the given secrets (API keys, a password in a URL) in text and bytes."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        found = sorted({f for s in secrets if s for f in forms(s)}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, found))) if found else None
        self._bytes = re.compile(b"|".join(re.escape(f.encode()) for f in found)) if found else None

    def __call__(self, text: str) -> str:
        return self._pattern.sub(MASK, text) if self._pattern is not None else text

    def scrub_bytes(self, data: bytes) -> bytes:
        return self._bytes.sub(MASK.encode(), data) if self._bytes is not None else data

    def write(self, path: str | Path, data: str | bytes) -> None:
        """Write a report (or a body beside one), its secrets masked."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        Path(path).write_bytes(self.scrub_bytes(raw))

    def console(self, console: Console) -> Console:
        """`console`, writing through this scrubber from now on; its lines no longer wrapped
        (soft wrap), so a secret is never cut in two before it is masked."""
        console.file = cast(IO[str], _ScrubbedFile(console.file, self))
        console.soft_wrap = True
        return console


class _ScrubbedFile(io.TextIOBase):
    def __init__(self, inner: IO[str], scrub: Scrubber) -> None:
        self._inner, self._scrub = inner, scrub

    def write(self, text: str) -> int:
        self._inner.write(self._scrub(text))
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()


def scrubbed(args: Any, *consoles: Console) -> list[Console]:
    """The consoles of a command, writing through one scrubber of its arguments' secrets (its
    keys, a password or query value in its URLs)."""
    keys = [getattr(args, name, None) for name in ("api_key", "exhausted_key", "other_key")]
    names = ("base_url", "other_url", "metrics_url")
    urls = [u for u in (getattr(args, name, None) for name in names) if u]
    scrub = Scrubber(keys + [s for u in urls for s in url_secrets(u)])
    return [scrub.console(c) for c in consoles]


