"""Secrets out of everything the suite writes: the one place a report, a body file, a curl line
or a terminal line leaves the process (`Scrubber.write`, `Scrubber.console`).

The last line of defence: a server's answers are masked as they enter the suite, before any cut
(conformance.wire.secrets); what the suite writes is masked again here, in every form a server
may plausibly echo a key (`forms`: the header the suite sent under any scheme, `Token KEY`,
`Basic base64(user:KEY)`, JSON-, URL- and HTML-escaped).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, cast

from rich.console import Console

from conformance.engine.config import url_secrets
from conformance.wire.secrets import SECRETS, Secrets


class Scrubber(Secrets):
    """Masks the given secrets (API keys, a password in a URL) in what the suite writes: whole,
    in any form, and any piece of 8 characters of one (wire.secrets.Secrets, `pieces`)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        super().__init__(secrets, pieces=True)

    def scrub_bytes(self, data: bytes) -> bytes:
        return self.mask_bytes(data)

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
    secrets = keys + [s for u in urls for s in url_secrets(u)]
    SECRETS.add(*secrets)  # masked as answers enter too, before any cut
    scrub = Scrubber(secrets)
    return [scrub.console(c) for c in consoles]
