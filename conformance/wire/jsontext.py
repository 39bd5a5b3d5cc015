"""A server's JSON as the gate reads it: integers of at most half the digits Python will print.

Python refuses to turn an int of more than `sys.get_int_max_str_digits()` digits (4,300) into
text, and its JSON decoder refuses a longer literal. A literal just under that limit parses, but
the sum of two of them (a usage's prompt and completion tokens, a ledger's total) or a product
can no longer be printed in a finding or a report: the gate would crash on a lying server's
answer. At most half the limit, the sum or product of two stays printable; a longer literal is
not JSON the gate reads (a finding of the check, as any unreadable body is).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _int(text: str) -> int:
    limit = sys.get_int_max_str_digits()
    if limit and len(text.lstrip("-")) > limit // 2:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def loads(data: str | bytes) -> Any:
    """json.loads, its integers bounded as the module says (ValueError past it)."""
    return json.loads(data, parse_int=_int)
