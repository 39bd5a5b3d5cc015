"""A secret that an answer spells in pieces: a key inside a prompt comes back echoed as tokens
(logprobs.tokens, their top_logprobs keys, prompt_logprobs' decoded_token) and, streamed, as
text split across events, where no piece holds the whole key for a text replacement to find.

Each sequence of pieces (a choice's text over the stream's events, its tokens, its prompt's
chosen decoded tokens) is joined, the secret's spans found in the join, and the pieces that
overlap a span rewritten so that the join reads the mask once in the span's place: the first
piece of a span holds the mask, the rest of the span is left out of the pieces after it. The
tokens still join to the text, and their text_offset follows. An alternative at a rewritten position (top_logprobs, the
prompt's alternatives) is left out: it may be the secret's next piece. Token ids are numbers
without a tokenizer here: a key sent or answered only as ids is not found.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["masked_answer", "masked_pieces"]

Chunk = tuple[float, bytes]
EVENT_END = re.compile(rb"\r?\n\r?\n")


def masked_pieces(pieces: list[str], values: Iterable[str], mask: str) -> list[str] | None:
    """`pieces` with each occurrence of a value in their join masked once; None if none occurs."""
    joined = "".join(pieces)
    spans = sorted(
        (m.start(), m.start() + len(v))
        for v in values
        if v
        for m in re.finditer(re.escape(v), joined)
    )
    if not spans:
        return None
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, at = [], 0
    for piece in pieces:
        a, b = at, at + len(piece)
        at, cursor, parts = b, a, []
        for start, end in merged:
            if start >= b or end <= a:
                continue
            parts.append(joined[cursor : max(start, a)])
            if start >= a:
                parts.append(mask)
            cursor = min(end, b)
        parts.append(joined[cursor:b])
        out.append("".join(parts))
    return out


def masked_answer(
    chunks: list[Chunk],
    stream: bool,
    values: Iterable[str],
    mask: str,
    text: Callable[[bytes], bytes],
) -> list[Chunk]:
    """The answer's chunks with every secret masked, the pieces' too (`text` masks whole
    occurrences); the chunks as they came when nothing was masked, else each event (or the
    whole body) at the time its last byte came."""
    body = b"".join(data for _, data in chunks)
    units = _units(chunks, body, stream)
    docs = [_doc(data, stream) for _, data in units]
    changed = _mask_docs([d for d in docs if d is not None], list(values), mask)
    out: list[Chunk] = []
    for (seconds, data), doc in zip(units, docs, strict=True):
        if doc is not None and id(doc) in changed:
            data = _event(doc) if stream else _json(doc)
        out.append((seconds, text(data)))
    if b"".join(data for _, data in out) == body:
        return chunks
    return out


def _units(chunks: list[Chunk], body: bytes, stream: bool) -> list[Chunk]:
    """The body's events (its whole, not a stream), each at the time its last byte came."""
    ends, at = [], 0
    for seconds, data in chunks:
        at += len(data)
        ends.append((at, seconds))
    bounds = [m.end() for m in EVENT_END.finditer(body)] if stream else []
    if not bounds or bounds[-1] != len(body):
        bounds.append(len(body))
    units, start, i = [], 0, 0
    for end in bounds:
        while i < len(ends) - 1 and ends[i][0] < end:
            i += 1
        units.append((ends[i][1] if ends else 0.0, body[start:end]))
        start = end
    return units


def _doc(data: bytes, stream: bool) -> dict[str, Any] | None:
    if stream:
        lines = data.strip().split(b"\n")
        if len(lines) != 1 or not lines[0].startswith(b"data:"):
            return None
        data = lines[0][5:]
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _event(doc: dict[str, Any]) -> bytes:
    return b"data: " + _json(doc) + b"\n\n"


def _mask_docs(docs: list[dict[str, Any]], values: list[str], mask: str) -> set[int]:
    """Masks each choice's pieces over all `docs` (a stream's events in order); the ids of the
    docs it changed."""
    by_index: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    for doc in docs:
        choices = doc.get("choices")
        for n, choice in enumerate(choices if isinstance(choices, list) else []):
            if isinstance(choice, dict):
                by_index.setdefault(choice.get("index", n), []).append((id(doc), choice))
    changed: set[int] = set()
    for parts in by_index.values():
        changed |= _mask_text(parts, values, mask)
        changed |= _mask_tokens(parts, values, mask)
        changed |= _mask_prompt(parts, values, mask)
    return changed


def _mask_text(parts: list[tuple[int, dict[str, Any]]], values: list[str], mask: str) -> set[int]:
    held = [(doc, c) for doc, c in parts if isinstance(c.get("text"), str)]
    new = masked_pieces([c["text"] for _, c in held], values, mask)
    changed = set()
    for (doc, choice), piece in zip(held, new or [], strict=False):
        if piece != choice["text"]:
            choice["text"] = piece
            changed.add(doc)
    return changed


def _mask_tokens(parts: list[tuple[int, dict[str, Any]]], values: list[str], mask: str) -> set[int]:
    rows: list[tuple[int, dict[str, Any], int]] = []  # (doc, logprobs, position)
    for doc, choice in parts:
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            continue
        tokens = lp.get("tokens")
        if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
            rows += [(doc, lp, i) for i in range(len(tokens))]
    new = masked_pieces([lp["tokens"][i] for _, lp, i in rows], values, mask)
    changed = set()
    shift = 0  # how much shorter the tokens before this one became: text_offset follows
    for (doc, lp, i), piece in zip(rows, new or [], strict=False):
        old = lp["tokens"][i]
        offsets = lp.get("text_offset")
        at = offsets[i] if isinstance(offsets, list) and i < len(offsets) else None
        if shift and isinstance(at, int):
            offsets[i] = at + shift  # type: ignore[index]
            changed.add(doc)
        if piece == old:
            continue
        shift += len(piece) - len(old)
        lp["tokens"][i] = piece
        top = lp.get("top_logprobs")
        if isinstance(top, list) and i < len(top) and isinstance(top[i], dict):
            logprobs = lp.get("token_logprobs")
            value = top[i].get(old, logprobs[i] if isinstance(logprobs, list) else None)
            top[i] = {piece: value}
        changed.add(doc)
    return changed


def _mask_prompt(parts: list[tuple[int, dict[str, Any]]], values: list[str], mask: str) -> set[int]:
    for doc, choice in parts:
        rows = choice.get("prompt_logprobs")
        if not isinstance(rows, list):
            continue
        ids = choice.get("prompt_token_ids")
        chosen = [_chosen(row, ids, i) for i, row in enumerate(rows)]
        pieces = [row[key]["decoded_token"] if key else "" for row, key in zip(rows, chosen)]
        new = masked_pieces(pieces, values, mask)
        if new is None:
            continue
        for i, (key, old, piece) in enumerate(zip(chosen, pieces, new, strict=True)):
            if key is not None and piece != old:
                rows[i] = {key: {**rows[i][key], "decoded_token": piece}}
        return {doc}
    return set()


def _chosen(row: Any, ids: Any, i: int) -> str | None:
    """The key of a prompt position's own token: its id where the answer gives the prompt's ids,
    else the first (vLLM writes the actual token first, then the alternatives)."""
    if not isinstance(row, dict) or not row:
        return None
    if isinstance(ids, list) and i < len(ids) and str(ids[i]) in row:
        key = str(ids[i])
    else:
        key = next(iter(row))
    entry = row[key]
    if not isinstance(entry, dict) or not isinstance(entry.get("decoded_token"), str):
        return None
    return key


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
