"""The run's secrets masked where a server's words enter the suite, before anything is cut.

Every answer is masked as it is read (the client, the raw sockets, schemathesis's session, the
metrics scrape): a key a server quotes back is `MASKED` in every check, finding, report and line
from then on, whichever of them cuts the text later. A text cut at a bound (`cut`) is masked of
what is left of a secret at its end too: a piece of PIECE characters or more.

A key reaches an answer in many forms: as it is, JSON-, URL- or HTML-escaped, and inside base64
at each of its three alignments (a key base64-encoded inside a longer string only shows its middle,
in one of three shapes), standard and URL-safe alphabets (`forms`).

Whatever its form, a piece of PIECE characters or more of a secret is masked anywhere, not only
at a cut (`pieces`): a key split by a space, or over two stream events, or quoted in part. The text
is read decoded first (`_decoded`): JSON string escapes (`\\uXXXX`, `\\/`, under any number of
backslashes: a JSON report quotes a server's escapes once more) and percent-encoding, each decoded
piece masked where its encoded form stands.

The secrets are the process's: a run adds its own (`add`), and a secret once added is masked
for the rest of the process (masking an earlier run's key too is harmless; forgetting one is
not). A key shorter than MIN_SECRET characters cannot be told from the words around it and is not
masked (a one-letter test key would mask every letter like it).
"""

from __future__ import annotations

import base64
import bisect
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


def pieces(secret: str) -> set[str]:
    """Every run of PIECE characters of `secret`: what is masked wherever it stands."""
    if len(secret) < MIN_SECRET:
        return set()
    return {secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1)}


# A JSON escape under any number of backslashes, a percent-escape, a run of neither, or one
# backslash or percent sign that escapes nothing.
_TOKEN = re.compile(r"\\+u([0-9a-fA-F]{4})|\\+([/\"'])|%([0-9A-Fa-f]{2})|[^\\%]+|[\\%]")


def _decoded(text: str) -> tuple[str, list[tuple[int, int, int, bool]]]:
    """`text` with its escapes decoded, and its segments: (start in the decoded text, start in
    `text`, length in `text`, whether the segment is text as it stands)."""
    parts: list[str] = []
    segments: list[tuple[int, int, int, bool]] = []
    at = 0
    for m in _TOKEN.finditer(text):
        code, char, percent = m.groups()
        if code is not None:
            piece, plain = chr(int(code, 16)), False
        elif char is not None:
            piece, plain = char, False
        elif percent is not None:
            piece, plain = chr(int(percent, 16)), False
        else:
            piece, plain = m.group(), True
        segments.append((at, m.start(), m.end() - m.start(), plain))
        parts.append(piece)
        at += len(piece)
    return "".join(parts), segments


def _runs(
    text: str, pattern: re.Pattern[str], starts: dict[str, list[str]]
) -> list[tuple[int, int]]:
    """The spans of `text` that hold a run of a secret's pieces: each found piece extended as
    far as the text goes on as a secret it starts (`starts`: piece -> the tails of the secrets
    from it), so a run is masked whole, not piece by piece."""
    out = []
    m = pattern.search(text)
    while m is not None:
        end = m.end()
        for tail in starts.get(m.group(), ()):
            at, k = m.end(), len(m.group())
            while k < len(tail) and at < len(text) and text[at] == tail[k]:
                at, k = at + 1, k + 1
            end = max(end, at)
        out.append((m.start(), end))
        m = pattern.search(text, end)
    return out


def _spans(
    text: str, pattern: re.Pattern[str], starts: dict[str, list[str]]
) -> list[tuple[int, int]]:
    """The spans of `text` whose decoded form holds a run of a secret."""
    decoded, segments = _decoded(text)
    first_of = [seg[0] for seg in segments]
    out = []
    for begin_at, end_at in _runs(decoded, pattern, starts):
        first = segments[bisect.bisect_right(first_of, begin_at) - 1]
        last = segments[bisect.bisect_right(first_of, end_at - 1) - 1]
        begin = first[1] + (begin_at - first[0] if first[3] else 0)
        end = last[1] + (end_at - last[0] if last[3] else last[2])
        out.append((begin, end))
    return out


def _latin(text: str) -> str:
    """`text` as its UTF-8 bytes read one character a byte (how mask_bytes reads bytes)."""
    return text.encode().decode("latin-1")


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for begin, end in sorted(spans):
        if end <= at:
            continue
        out += [text[at : max(at, begin)], MASKED]
        at = end
    return "".join(out) + text[at:]


class Secrets:
    """Masks the secrets it holds in text and bytes, and at a cut; with `pieces`, any run of
    PIECE characters of one too (what is written: reports, terminal lines). Without (answers as
    they enter), a secret whole, in any form: a piece of 8 may be the gate's own words (a key
    "conformance-test-key" and the path "/v1/conformance-unknown-route" an answer quotes), and an
    answer masked there would be a false finding; what is written of it is masked of pieces."""

    def __init__(self, secrets: Iterable[str | None] = (), pieces: bool = False) -> None:
        self.pieces = pieces
        self._lock = threading.Lock()
        self._forms: list[str] = []
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        self._pieces: re.Pattern[str] | None = None  # over text decoded (_decoded)
        self._latin: re.Pattern[str] | None = None  # the same over bytes read as latin-1
        self._starts: dict[str, list[str]] = {}
        self._secrets: set[str] = set()
        self._latin_starts: dict[str, list[str]] = {}
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        new = {f for s in secrets if s for f in forms(s)} - set(self._forms)
        if not new:
            return
        with self._lock:
            found = sorted(set(self._forms) | new, key=len, reverse=True)
            self._forms = found
            self._secrets |= {s for s in secrets if s and len(s) >= MIN_SECRET}
            self._text = re.compile("|".join(map(re.escape, found)))
            self._bytes = re.compile(b"|".join(re.escape(f.encode()) for f in found))
            starts: dict[str, list[str]] = {}
            for secret in self._secrets:  # its escaped forms are decoded before (_decoded)
                if not self.pieces:
                    starts.setdefault(secret, []).append(secret)
                    continue
                for i in range(len(secret) - PIECE + 1):
                    starts.setdefault(secret[i : i + PIECE], []).append(secret[i:])
            self._starts = starts
            self._latin_starts = {
                _latin(p): [_latin(t) for t in tails] for p, tails in starts.items()
            }
            if starts:
                self._pieces = re.compile("|".join(map(re.escape, sorted(starts))))
                self._latin = re.compile("|".join(map(re.escape, sorted(self._latin_starts))))

    @property
    def longest(self) -> int:
        """The longest form masked: what masking a text's head needs beyond where it is cut."""
        return len(self._forms[0]) if self._forms else 0

    def __call__(self, text: str) -> str:
        pattern = self._text
        text = pattern.sub(MASKED, text) if pattern is not None else text
        return self._mask(text, self._pieces, self._starts)

    def mask_bytes(self, data: bytes) -> bytes:
        pattern = self._bytes
        data = pattern.sub(MASKED.encode(), data) if pattern is not None else data
        text = data.decode("latin-1")  # a character a byte: the spans are the bytes' offsets
        masked = self._mask(text, self._latin, self._latin_starts)
        return data if masked is text else masked.encode("latin-1")

    @staticmethod
    def _mask(text: str, pattern: re.Pattern[str] | None, starts: dict[str, list[str]]) -> str:
        """`text` with every run of a secret's pieces masked, in its decoded form too."""
        if pattern is None:
            return text
        if "\\" not in text and "%" not in text:  # nothing to decode: the usual case
            spans = _runs(text, pattern, starts)
        else:
            spans = _spans(text, pattern, starts)
        return _masked(text, spans) if spans else text

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
