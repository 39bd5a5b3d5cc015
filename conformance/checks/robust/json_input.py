"""robust:json.* — JSON edge cases: NaN and Infinity, numbers past any range, nesting 100,000 deep."""

from __future__ import annotations

from conformance.checks.robust.raw import invalid_json, post, refused, robust
from conformance.engine.context import Context


@robust("robust:json.constants")
def json_constants(ctx: Context) -> None:
    """NaN, Infinity and -Infinity literals are not JSON: 400 invalid_json."""
    for literal in ("NaN", "Infinity", "-Infinity"):
        raw = f'{{"model":"{ctx.config.model}","prompt":[0],"max_tokens":1,"temperature":{literal}}}'.encode()
        refused(ctx, post(ctx, raw), f"temperature {literal}", invalid_json(ctx))


@robust("robust:json.huge_numbers")
def json_huge_numbers(ctx: Context) -> None:
    """1e999, 1e-999 and a 5,000-digit integer where an integer belongs: refused in the error shape, not echoed."""
    digits = "9" * 5000
    for literal in ("1e999", "-1e999", "1e-999", digits, "-" + digits):
        raw = f'{{"model":"{ctx.config.model}","prompt":[0],"max_tokens":{literal}}}'.encode()
        refused(
            ctx,
            post(ctx, raw),
            f"max_tokens {literal[:12]}",
            echo=literal if len(literal) > 100 else None,
        )


@robust("robust:json.deep_nesting")
def json_deep_nesting(ctx: Context) -> None:
    """Arrays and objects nested 100,000 deep: refused in the error shape."""
    depth = 100_000
    arrays = b"[" * depth + b"]" * depth
    objects = b'{"a":' * depth + b"1" + b"}" * depth
    for name, nested in (("arrays", arrays), ("objects", objects)):
        raw = (
            b'{"model":"'
            + ctx.config.model.encode()
            + b'","max_tokens":1,"prompt":'
            + nested
            + b"}"
        )
        refused(ctx, post(ctx, raw), f"{name} nested {depth} deep")
