"""Rewrite one generated block of README.md, between its begin and end markers."""

from __future__ import annotations

from pathlib import Path


def replace_block(readme: Path, begin: str, end: str, text: str) -> None:
    """Put `text` between `begin` and `end`; exit with the reason if the markers are missing."""
    content = readme.read_text(encoding="utf-8")
    if begin not in content or end not in content:
        raise SystemExit(f"{readme.name} has no {begin} ... {end} block")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{begin}\n{text}\n{end}{tail}", encoding="utf-8")
