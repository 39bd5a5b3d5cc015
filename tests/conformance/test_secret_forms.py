"""A secret masked in every form a server may echo it (issue 63, item 3): decoded before it is
masked (JSON escapes under any number of backslashes, `\\/`, percent-encoding), and any run of
PIECE characters of it masked wherever it stands (split by a space, over two stream events)."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest

from conformance.reports.scrub import Scrubber
from conformance.wire.secrets import MASKED, PIECE, Secrets

KEY = "sk-live/0123456789+abcdefXYZ"


def pieces_left(text: str) -> list[str]:
    """The PIECE-character runs of KEY in `text` as a reader decodes it."""
    decoded = urllib.parse.unquote(
        re.sub(
            r"\\+(?:u([0-9a-fA-F]{4})|([/\"]))",
            lambda m: chr(int(m[1], 16)) if m[1] else m[2],
            text,
        )
    )
    runs = {KEY[i : i + PIECE] for i in range(len(KEY) - PIECE + 1)}
    return sorted(r for r in runs if r in text or r in decoded)


HALF = len(KEY) // 2
FORMS = {
    "as it is": f"the key {KEY} was sent",
    "each character a JSON escape": "".join(f"\\u{ord(c):04x}" for c in KEY),
    "escaped once more (a JSON report)": "".join(f"\\\\u{ord(c):04x}" for c in KEY),
    "slash escaped": KEY.replace("/", "\\/"),
    "slash escaped once more": json.dumps(KEY.replace("/", "\\/")),
    "percent-encoded": "".join(f"%{b:02X}" for b in KEY.encode()),
    "split by a space": f"{KEY[:HALF]} {KEY[HALF:]}",
    "over two events": (
        f'data: {{"choices":[{{"text":"{KEY[:HALF]}"}}]}}\n\n'
        f'data: {{"choices":[{{"text":"{KEY[HALF:]}"}}]}}\n\n'
    ),
    "a piece of it": f"quoted: {KEY[3 : 3 + PIECE + 2]}!",
}


@pytest.mark.parametrize("form", FORMS)
def test_no_piece_of_a_secret_survives_masking_in_any_form(form: str) -> None:
    text = FORMS[form]
    assert pieces_left(text)  # the form holds the key before masking
    secrets = Secrets([KEY], pieces=True)  # what is written (reports.scrub.Scrubber)
    assert pieces_left(secrets(text)) == []
    assert pieces_left(secrets.mask_bytes(text.encode()).decode()) == []
    assert MASKED in secrets(text)


def test_a_report_written_holds_no_piece_of_the_key_in_any_form(tmp_path: Path) -> None:
    report = json.dumps({"received": list(FORMS.values())})
    Scrubber([KEY]).write(tmp_path / "r.json", report)
    written = (tmp_path / "r.json").read_text()
    assert pieces_left(written) == []
    json.loads(written)  # still JSON: what was masked stood inside its strings


WHOLE = (
    "as it is",
    "each character a JSON escape",
    "escaped once more (a JSON report)",
    "slash escaped",
    "slash escaped once more",
    "percent-encoded",
)


@pytest.mark.parametrize("form", WHOLE)
def test_answers_as_they_enter_are_masked_of_the_whole_key_in_any_form(form: str) -> None:
    """At entry (wire.secrets.SECRETS's mode) a whole key is masked, decoded or not; a piece of
    8 is left, for a piece may be the gate's own words quoted back (a path), never a key's."""
    assert pieces_left(Secrets([KEY])(FORMS[form])) == []
    own = f"/v1/{KEY[3:11]}-route"  # a key's 8 characters in what the gate itself sent
    assert Secrets([KEY])(own) == own and MASKED in Secrets([KEY], pieces=True)(own)


def test_text_without_a_secret_is_left_as_it_was() -> None:
    secrets = Secrets([KEY], pieces=True)
    assert secrets("sk-live is 7 of it, sk-live/ is 8") == "sk-live is 7 of it, *** is 8"
    assert secrets("100% of \\u0041 and \\/ and %20") == "100% of \\u0041 and \\/ and %20"
