"""A cassette on disk (openapi.yaml x-mock-cassette): its lines checked at start, indexed by
where they lie in the file, each read again when a request matches it; and the secrets masked
before anything is written.

The index keeps only offsets: a replaying mock's workers share the file through the page cache
instead of each holding its own copy of every exchange (a 200 MB cassette took 1.58 GB over a
master and two workers when each parsed it whole). Each line is read at most max_line_bytes at
a time and checked against the spec's schemas with its base64 decoded, so that a bad line stops
start-up naming its line number, never a request later.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import logging
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastjsonschema

from api_server.config import ConfigError
from contract import Spec

log = logging.getLogger(__name__)


def data_of(chunk: list[Any]) -> bytes:
    """A recorded body or chunk's bytes: [text] or [null, base64] after its time, if any."""
    if chunk[1] is not None:
        return chunk[1].encode("utf-8")
    return base64.b64decode(chunk[2], validate=True)


# -- secrets -------------------------------------------------------------------------------


class Secrets:
    """What must never be written for one request: the values masked wherever they occur, and
    the fields (query parameters, JSON keys, headers) whose names say they hold one."""

    def __init__(self, api: Spec, values: Iterable[str | None] = ()) -> None:
        conf = api.mock_cassette
        self.mask = str(conf["mask"])
        self.names = re.compile(conf["secret_names"])
        self.least = int(conf["min_secret_chars"])
        self.values: set[str] = set()
        self.add(*values)

    def add(self, *values: str | None) -> None:
        for value in values:
            if value and len(value) >= self.least:
                self.values |= {
                    value,
                    json.dumps(value)[1:-1],
                    urllib.parse.quote(value, safe=""),
                    urllib.parse.quote_plus(value),
                }

    def text(self, text: str) -> str:
        for value in sorted(self.values, key=len, reverse=True):
            text = text.replace(value, self.mask)
        return text

    def data(self, data: bytes) -> bytes:
        for value in sorted(self.values, key=len, reverse=True):
            data = data.replace(value.encode(), self.mask.encode())
        return data

    def of_headers(self, headers: Iterable[tuple[str, str]]) -> None:
        """The credentials of the request's headers: a secret-named header's value, and the
        credentials after an Authorization scheme (a Basic one's password too)."""
        for name, value in headers:
            if not self.names.match(name):
                continue
            scheme, _, credentials = value.partition(" ")
            self.add(value, credentials.strip())
            if scheme.lower() == "basic":
                try:
                    decoded = base64.b64decode(credentials.strip(), validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    continue
                self.add(decoded, decoded.partition(":")[2])

    def target(self, target: str) -> str:
        """A request target with each secret-named query parameter's value masked (and added)."""
        path, sep, query = target.partition("?")
        if not sep:
            return target
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        for name, value in pairs:
            if self.names.match(name):
                self.add(value)
        kept = [(k, self.mask if self.names.match(k) else v) for k, v in pairs]
        return path + "?" + urllib.parse.urlencode(kept, safe="*")

    def body(self, body: bytes) -> bytes:
        """A JSON body with each secret-named field's value masked (and added); other bodies
        as they are."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return body
        if not isinstance(data, (dict, list)):
            return body
        masked = self._masked(data)
        return body if masked == data else json.dumps(masked, separators=(",", ":")).encode()

    def _masked(self, data: Any) -> Any:
        if isinstance(data, dict):
            out = {}
            for k, v in data.items():
                if self.names.match(k) and isinstance(v, str):
                    self.add(v)
                    out[k] = self.mask
                else:
                    out[k] = self._masked(v)
            return out
        if isinstance(data, list):
            return [self._masked(v) for v in data]
        return data


# -- matching ------------------------------------------------------------------------------


def match_key(method: str, path: str, body: bytes) -> str:
    """What a request is matched by: method, path and query, and its body as data (all
    masked as they were written)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        canonical = body
    return hashlib.sha256(
        b"\0".join([method.upper().encode(), path.encode(), canonical])
    ).hexdigest()


def differing(a: bytes, b: bytes) -> list[str] | None:
    """The top-level fields in which two JSON object bodies differ (None: not both objects)."""
    try:
        x, y = json.loads(a), json.loads(b)
    except (ValueError, RecursionError):
        return None
    if not isinstance(x, dict) or not isinstance(y, dict):
        return None
    return sorted(k for k in x.keys() | y.keys() if x.get(k, ...) != y.get(k, ...))


# -- the file ------------------------------------------------------------------------------


@dataclass
class Tape:
    """A checked cassette: each exchange's line by match key, and by method and path (for the
    closest one to a miss), as (offset, length) in the file."""

    path: Path
    by_key: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    by_route: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)

    def exchange(self, where: tuple[int, int]) -> dict[str, Any]:
        """The exchange at `where`, read from the file (the process's own descriptor: opened
        after a fork, shared by its threads through pread)."""
        offset, length = where
        line = os.pread(self._fd(), length, offset)
        result: dict[str, Any] = json.loads(line)
        return result

    def _fd(self) -> int:
        pid = os.getpid()
        if getattr(self, "_pid", None) != pid:
            self._pid, self._file = pid, os.open(self.path, os.O_RDONLY)
        return self._file


def _lines(path: Path, limit: int, name: str) -> Iterator[tuple[int, int, int, bytes]]:
    """(line number, offset, length, bytes) of each line, none read past `limit` bytes."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"{name} {path}: not a cassette: {exc.strerror}") from None
    with f:
        offset, number = 0, 0
        while True:
            line = f.readline(limit + 1)
            if not line:
                return
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise ConfigError(f"{name} {path}: line {number}: longer than {limit} bytes")
            yield number, offset, len(line), line
            offset += len(line)


def load(path: Path, api: Spec, name: str = "--replay") -> Tape:
    """The cassette at `path`, every line checked (ConfigError naming the first bad one's
    number, or a cassette recorded under another openapi.yaml)."""
    conf = api.mock_cassette
    header = fastjsonschema.compile(conf["header_schema"])
    exchange = fastjsonschema.compile(_bounded_times(conf["exchange_schema"], api))
    tape = Tape(path)
    first = True
    for number, offset, length, raw in _lines(path, int(conf["max_line_bytes"]), name):
        if not raw.strip():
            continue

        def bad(why: str, number: int = number) -> ConfigError:
            return ConfigError(f"{name} {path}: line {number}: {why}")

        try:
            line = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            if not raw.endswith(b"\n") and not first:  # the last line, cut: a recorder killed
                log.warning("%s %s: line %d is cut (no end of line): left out", name, path, number)
                continue
            raise bad(f"not JSON ({exc})") from None
        try:
            (header if first else exchange)(line)
        except fastjsonschema.JsonSchemaException as exc:
            raise bad(
                f"not a cassette's {'header' if first else 'exchange'}: {_why(exc)}"
            ) from None
        if first:
            _check_header(line, path, api, name)
            first = False
            continue
        try:
            body = data_of([0, *line["body"]])
            for chunk in line["response"]["chunks"]:
                data_of(chunk)
        except (binascii.Error, IndexError, TypeError):
            raise bad("a body or chunk that is neither text nor base64") from None
        where = (offset, length)
        key = match_key(line["method"], line["path"], body)
        tape.by_key.setdefault(key, []).append(where)
        tape.by_route.setdefault((line["method"], line["path"].split("?")[0]), []).append(where)
    if first:
        raise ConfigError(f"{name} {path}: not a cassette: empty")
    return tape


def error_shape(api: Spec) -> Callable[[bytes], bool]:
    """Whether a body is the API's error shape (ErrorBody): what a recorded error should be."""
    validate = fastjsonschema.compile(api.schema("ErrorBody"))

    def shaped(body: bytes) -> bool:
        try:
            validate(json.loads(body))
        except (ValueError, RecursionError, fastjsonschema.JsonSchemaException):
            return False
        return True

    return shaped


def _bounded_times(schema: dict[str, Any], api: Spec) -> dict[str, Any]:
    """The exchange schema with a chunk's time at most the API's wait (x-caps.wait_seconds): a
    time past it (1e9, or milliseconds written for seconds) is refused at start, never waited."""
    bounded = copy.deepcopy(schema)
    when = bounded["properties"]["response"]["properties"]["chunks"]["items"]["items"][0]
    when["maximum"] = api.caps["wait_seconds"]
    when["description"] = (
        f"the seconds since the request began, from 0 to the API's wait ({api.caps['wait_seconds']})"
    )
    return bounded


def _why(exc: fastjsonschema.JsonSchemaException) -> str:
    """What the schema's error says, and what the value must be where the schema describes it
    (its own words, "must NOT match a disallowed definition", name no rule)."""
    definition = getattr(exc, "definition", None)
    said = definition.get("description") if isinstance(definition, dict) else None
    where = str(getattr(exc, "name", "")).replace("data", "the line", 1)
    return f"{exc}; {where} must be {said}" if said else str(exc)


def _check_header(line: dict[str, Any], path: Path, api: Spec, name: str) -> None:
    conf = api.mock_cassette
    if line["cassette"] != conf["format"]:
        raise ConfigError(f"{name} {path}: line 1: not a cassette of format {conf['format']}")
    if line["spec_version"] != api.version:
        raise ConfigError(
            f"{name}: "
            + conf["stale"].format(
                cassette=path, recorded=line["spec_version"], current=api.version
            )
        )
