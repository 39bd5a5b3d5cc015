"""The text the gate's drawn prompts are cut from (corpus.txt, shipped with the package):
ordinary English prose, a paragraph a line, written for this project."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@cache
def sentences() -> tuple[str, ...]:
    """The corpus's sentences in order, each once (a missing file is an error, never no text)."""
    text = resources.files(__package__).joinpath("corpus.txt").read_text(encoding="utf-8")
    out = tuple(s.strip() for line in text.splitlines() for s in _SENTENCE.split(line) if s.strip())
    if not out:
        raise RuntimeError("conformance/spec/corpus.txt holds no sentence")
    return out


def passage(start: int, chars: int) -> str:
    """Whole sentences from sentence `start` on (around the corpus's end to its start) until they
    hold at least `chars` characters."""
    every = sentences()
    out: list[str] = []
    i = start
    while sum(len(s) + 1 for s in out) < chars:
        out.append(every[i % len(every)])
        i += 1
    return " ".join(out)
