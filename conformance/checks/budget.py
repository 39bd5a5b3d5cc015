"""budget:* — the Budget, seen from outside: only with a key the deployment has run dry.

A server's Budget is per key and its remaining size is not observable, so these
checks need a key whose Budget cannot hold one generated token
(--exhausted-key); without one they are skipped.
"""

from __future__ import annotations

import re

from conformance.engine.context import Context
from conformance.engine.registry import register


def template_regex(template: str) -> re.Pattern[str]:
    """A message template with each {field} matching any text."""
    parts = re.split(r"\{[a-z_]+\}", template)
    return re.compile(".+?".join(re.escape(p) for p in parts))


@register("budget:exhausted_key", tags=("budget",), worst=1)
def exhausted_key(ctx: Context) -> None:
    """A key whose Budget cannot hold one token: 429 insufficient_quota in the error shape,
    with `x-should-retry: false`."""
    key = ctx.config.exhausted_key
    if not key:
        ctx.skip("needs a key whose Budget is spent: pass --exhausted-key KEY")
    body = {"model": ctx.config.model, "prompt": [0], "max_tokens": 1, "n": 1}
    reply = ctx.client.post(ctx.api.completions_path, body, auth=f"Bearer {key}")
    code = "insufficient_quota"
    ctx.expect_status(reply, ctx.api.error_codes[code]["status"], fatal=True)
    error = reply.data.get("error", {}) if isinstance(reply.data, dict) else {}
    ctx.equal(
        "type, code and param",
        [ctx.api.error_codes[code]["type"], code, None],
        [error.get("type"), error.get("code"), error.get("param")],
        reply,
    )
    pattern = template_regex(ctx.api.messages[code])
    ctx.expect(
        bool(pattern.fullmatch(str(error.get("message")))),
        "the message does not follow its template",
        expected=ctx.api.messages[code],
        received=error.get("message"),
        reply=reply,
    )
    ctx.expect_request_id(reply, in_body=True)
    # x-should-retry: false, so that SDKs do not retry a spent Budget (x-error-codes headers)
    for name, value in ctx.api.error_headers(code).items():
        ctx.equal(f"the {name} header", value, reply.headers.get(name), reply)
