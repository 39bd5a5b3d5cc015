"""The headers the openai Python SDK sends (its version pinned in pyproject.toml's [conformance]
extra), which every request of the gate's client and of its schemathesis phase carries: a server
cannot tell the gate from a client by them (conformance/README.md, "A client's traffic").

They are read from the SDK itself, through its public API: one request sent over the MockTransport
of the SDK's HTTP client (httpx2, openai 3's), which keeps its headers and answers nothing. What
stays the gate's own: the key and the body's Content-Type and Length. The SDK's Accept-Encoding
(gzip, deflate) is kept: the gate decodes within its byte bound (wire.client.BoundedTransport).
"""

from __future__ import annotations

import functools

THEIRS = (
    "host",
    "content-length",
    "content-type",
    "authorization",
    "connection",
)


@functools.cache
def client_headers() -> dict[str, str]:
    """The openai SDK's headers of a completion request, less THEIRS."""
    import httpx2
    import openai

    seen: list[httpx2.Request] = []

    def keep(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(503, json={"error": {"message": "headers kept"}})

    sdk = openai.OpenAI(
        api_key="-",
        base_url="http://sdk.invalid/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(keep)),
    )
    try:
        sdk.completions.create(model="-", prompt="-", max_tokens=1)
    except openai.APIError:
        pass
    (request,) = seen
    return {k: v for k, v in request.headers.items() if k.lower() not in THEIRS}
