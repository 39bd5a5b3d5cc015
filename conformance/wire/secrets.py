"""The run's secrets masked where a server's words enter the suite, before anything is cut.

Every answer is masked as it is read (the client, the raw sockets, schemathesis's session, the
metrics scrape): a key a server quotes back is `MASKED` in every check, finding, report and line
from then on, whichever of them cuts the text later. A text cut at a bound (`cut`) is masked of
what is left of a secret at its end too: a piece of PIECE characters or more.

A key reaches an answer in many forms: as it is, JSON-, URL- or HTML-escaped, and inside base64
at each of its three alignments (a key base64-encoded inside a longer string only shows its middle,
in one of three shapes), standard and URL-safe alphabets (`forms`).

The secrets are the process's: a run adds its own (`add`), and a secret once added is masked
for the rest of the process (masking an earlier run's key too is harmless; forgetting one is
not). A key shorter than MIN_SECRET characters cannot be told from the words around it and is not
masked (a one-letter test key would mask every letter like it).
"""

from __future__ import annotations

import base64
import html
import json
import re
import threading
import urllib.parse
from collections.abc import Iterable

MASKED = "***"
MIN_SECRET = 6
PIECE = 8  # the shortest piece of a secret left at a cut that is masked too


def _base64_cores(secret: bytes) -> set[str]:
    """What base64 of any string that holds `secret` shows of it: at each alignment, the
    characters that depend on the secret's bytes alone."""
    cores = set()
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + secret).decode()
        start = -(-pad * 4 // 3)  # characters that hold the padding's bits
        end = (pad + len(secret)) * 4 // 3  # the last character that holds only the secret's bits
        core = encoded[start:end]
        if len(core) >= MIN_SECRET:
            cores.add(core)
            cores.add(core.translate(str.maketrans("+/", "-_")))
    return cores


def forms(secret: str) -> set[str]:
    """Every form of `secret` that is masked."""
    if len(secret) < MIN_SECRET:
        return set()
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        urllib.parse.quote(secret, safe=""),
        html.escape(secret),
        urllib.parse.quote_plus(secret),
        *_base64_cores(secret.encode()),
    }


class Secrets:
    """Masks the secrets it holds in text and bytes, and at a cut."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._lock = threading.Lock()
        self._forms: list[str] = []
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        new = {f for s in secrets if s for f in forms(s)} - set(self._forms)
        if not new:
            return
        with self._lock:
            found = sorted(set(self._forms) | new, key=len, reverse=True)
            self._forms = found
            self._text = re.compile("|".join(map(re.escape, found)))
            self._bytes = re.compile(b"|".join(re.escape(f.encode()) for f in found))

    @property
    def longest(self) -> int:
        """The longest form masked: what masking a text's head needs beyond where it is cut."""
        return len(self._forms[0]) if self._forms else 0

    def __call__(self, text: str) -> str:
        pattern = self._text
        return pattern.sub(MASKED, text) if pattern is not None else text

    def mask_bytes(self, data: bytes) -> bytes:
        pattern = self._bytes
        return pattern.sub(MASKED.encode(), data) if pattern is not None else data

    def cut(self, text: str, at: int) -> str:
        """`text` masked, then its first `at` characters, a piece of a secret left at the end
        masked too."""
        text = self(text)
        if len(text) <= at:
            return text
        return self.tail(text[:at])

    def tail(self, text: str) -> str:
        """`text` (a cut's head) with a start of a secret's form at its end masked, when that
        start is PIECE characters or more."""
        for form in self._forms:
            for k in range(min(len(form) - 1, len(text)), PIECE - 1, -1):
                if text.endswith(form[:k]):
                    return text[:-k] + MASKED
        return text


SECRETS = Secrets()  # the process's: every run adds its own (engine.runner.connect, the CLI)
