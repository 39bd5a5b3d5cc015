"""robust:* — hostile input (api-decisions.md, "Hostile input"), as an attacker sends it.

Each check fails on a 5xx, on no answer within the run's --timeout (a hang), on
an error body that is not the API's shape, on an input value quoted back past
x-caps.quoted_chars, or on a server that does not answer GET /health with 200
afterwards. Where the spec fixes the answer, the whole body is compared.

Requests go over raw sockets (conformance/wire/rawhttp.py) to the base URL only, one
connection at a time, each read bounded by --timeout. Every body that a broken
server could accept carries max_tokens 1, and a conformant one accepts none, so
the group generates no tokens (the quick profile runs it); the one check that
needs an accepted stream (disconnect.mid_stream) is in the full profile. A
stalled body waits the server's body-read timeout, so it only runs when
--stall-seconds says how long to wait.

The raw layer is raw.py; each family of checks is a module of its own; MODULES is the order
they run in (and are listed).
"""

from importlib import import_module

MODULES = (
    "surrogate",
    "json_input",
    "lists",
    "steering",
    "priority",
    "echo",
    "framing",
    "headers",
    "disconnect",
)
for _module in MODULES:
    import_module(f"{__name__}.{_module}")
