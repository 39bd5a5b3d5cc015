"""One HTTP exchange as the reports show it (Exchange), and quoting within a bound with the run's
secrets masked first (quote, bounded): what the wire records and every layer above shows."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from conformance.wire.secrets import MASKED, SECRETS

ENV_API_KEY = "CONFORMANCE_API_KEY"  # where the CLI, replay and a finding's curl line read the key

# The most of any body (request or response) or value a report quotes, in bytes of
# UTF-8: a server that writes 27 KB of text for one probe must not fill the reports.
QUOTE_LIMIT_BYTES = 4096


def quote(data: bytes | str, limit: int = QUOTE_LIMIT_BYTES) -> str:
    """`data` as text, the run's secrets masked, then cut at `limit` bytes with its full length
    stated (a piece of a secret left at the cut masked too)."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "replace")
    # only what can be shown is masked: every secret that starts before the cut ends within
    # `longest` bytes of it (a body of megabytes is not scanned whole for a 4 KiB quote)
    head = SECRETS.mask_bytes(raw[: limit + SECRETS.longest])
    if len(raw) <= limit + SECRETS.longest and len(head) <= limit:
        return head.decode("utf-8", "replace")
    shown = SECRETS.tail(head[:limit].decode("utf-8", "ignore"))
    return f"{shown}... (cut: {len(raw)} bytes in all)"


def bounded(value: Any, limit: int = QUOTE_LIMIT_BYTES) -> Any:
    """`value` as is when its JSON is within `limit` bytes; else its JSON, quoted and cut."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if len(text.encode("utf-8", "replace")) <= limit:
        return value
    return quote(text, limit)


@dataclass
class Exchange:
    """One HTTP request and its response, summarised for reports (bodies bounded)."""

    method: str
    url: str
    request_headers: dict[str, str]
    request_body: str | None
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str | None = None
    error: str | None = None  # no HTTP response: the transport's reason
    sent: bytes | None = field(default=None, repr=False)  # the whole request body, for curl()

    def body_file(self) -> str | None:
        """Where a report puts a body too large (or not text enough) for a command line:
        BODIES/<its sha256>.body beside the report (reports/json_report.py writes it)."""
        if self.sent is None or (len(self.sent) <= CURL_INLINE_BYTES and _text(self.sent)):
            return None
        return f"{BODIES}/{hashlib.sha256(self.sent).hexdigest()[:24]}.body"

    def curl(self) -> str:
        """One line that sends this request again: the key from $CONFORMANCE_API_KEY (never the
        run's), the body inline or by file (body_file), other headers as they were sent."""
        parts = ["curl", "-sS", "-i", "-X", self.method, shlex.quote(self.url)]
        for name, value in self.request_headers.items():
            if name.lower() != "content-length":
                # the key where it was (any scheme) read from the environment, the rest quoted
                pieces = f"{name}: {value}".split(MASKED)
                parts += [
                    "-H",
                    f'"${ENV_API_KEY}"'.join(shlex.quote(p) if p else "" for p in pieces),
                ]
        if self.sent is not None:
            where = self.body_file()
            # --data-raw: an inline body that starts with @ is data, never a file to read
            parts += (
                ["--data-binary", "@" + where]
                if where
                else ["--data-raw", shlex.quote(self.sent.decode("utf-8"))]
            )
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": {
                "method": self.method,
                "url": self.url,
                "headers": self.request_headers,
                "body": self.request_body,
            },
            "response": None
            if self.status is None
            else {
                "status": self.status,
                "headers": self.response_headers,
                "body": self.response_body,
            },
            "error": self.error,
            "curl": self.curl(),
        }


BODIES = "acs-bodies"  # the folder, beside a JSON report, of the bodies its curl lines send
CURL_INLINE_BYTES = 2048  # a longer body goes by file


def _text(raw: bytes) -> bool:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() for c in text)
