"""Writing a bench's markdown report: the new report above the marker line, and the
hand-written notes of the earlier one below it, kept."""

from __future__ import annotations

from pathlib import Path

NOTES_MARKER = "<!-- Hand-written notes below this line are kept when the report is rewritten. -->"


def kept_notes(path: Path) -> str:
    """The hand-written notes of an earlier report at `path` (after NOTES_MARKER)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    at = text.find(NOTES_MARKER)
    return "" if at < 0 else text[at + len(NOTES_MARKER) :].strip("\n")


def write_report(path: Path, text: str) -> None:
    """Write `text` to `path`, keeping the earlier report's hand-written notes below NOTES_MARKER."""
    notes = kept_notes(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        text + "\n" + NOTES_MARKER + "\n" + (notes + "\n" if notes else ""), encoding="utf-8"
    )
