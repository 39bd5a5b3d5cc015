"""The front's own answers, written from openapi.yaml: nginx's error pages as the API's error bodies.

A front (nginx, ingress-nginx) answers some requests itself, before the API sees them:
HTTP it cannot parse, a header or request line too large for its buffers, TRACE, a body
over its limit, an API that does not answer. Left to itself it writes an HTML page
without X-Request-Id. `nginx_errors` renders one nginx file (server context) that answers
each of these in the API's error shape, with the status, code and message the API itself
would give, and `req_$request_id` as both the body's request_id and X-Request-Id.
`ingress_nginx` puts the same pages and the site's settings into ingress-nginx's terms.
Run both whenever openapi.yaml changes (a test compares the shipped files with their output):

    python -m reference_impl.front > reference_impl/deploy/nginx/acs-errors.conf
    python -m reference_impl.front --ingress > reference_impl/deploy/k8s/ingress-nginx.yaml
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import yaml

from contract import (
    ApiError,
    Contract,
    Errors,
    InferenceUnavailable,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RequestTooLarge,
    Spec,
    UnsupportedTransferCoding,
)
from contract import (
    spec as default_spec,
)
from contract.errors import SpecText

PREFIX = "/.acs-front/"  # the error pages' internal locations
REQUEST_ID = "$request_id"  # nginx's 32 hex digits: x-request-id's prefix goes before it
METHOD, PATH = (
    "$request_method",
    "$acs_path",
)  # nginx's method token is [A-Z_-]: safe in JSON as it is
# A path a not_found message shows as it is; nginx can neither JSON-escape nor cut a value.
SAFE_PATH = r"^[A-Za-z0-9/._~-]{1,%d}$"

# nginx's status -> the API's answer in its place:
#   400, 414, 494, 505: nginx's parser refused the request (494: a header too large for its
#   buffers; 505: a version other than 1.x); the API's own parser answers these as malformed HTTP.
#   501: a Transfer-Encoding other than chunked, which the API answers with its own 501.
#   408: the client's body stalled past client_body_timeout (x-caps.body_read_seconds).
#   413: over client_max_body_size, which sits above the API's own cap.
#   500: nginx's own failure.  502, 503, 504: the API did not answer.
PAGES: dict[str, tuple[tuple[int, ...], Callable[[Spec], ApiError]]] = {
    "malformed": (
        (400, 408, 414, 494, 505),
        lambda api: InvalidRequest.from_template("malformed_http"),
    ),
    "not_decoded": (
        (501,),
        lambda api: UnsupportedTransferCoding.from_template("unsupported_transfer_coding"),
    ),
    "too_large": (
        (413,),
        lambda api: RequestTooLarge.from_template(
            "request_too_large", limit=api.caps["max_body_bytes"]
        ),
    ),
    "internal": ((500,), lambda api: InternalError.from_template("internal_error")),
    "unavailable": (
        (502, 503, 504),
        lambda api: InferenceUnavailable.from_template("inference_unavailable"),
    ),
}


def _literal(
    errors: Errors, error: ApiError, request_id: str, variables: tuple[str, ...] = ()
) -> str:
    """`error`'s body as an nginx string literal; it may hold nginx's `variables` and the request id's."""
    text = json.dumps(errors.body(error, request_id), ensure_ascii=False, separators=(",", ":"))
    if (
        "'" in text
        or "\\" in text
        or text.count("$") != sum(text.count(v) for v in (REQUEST_ID, *variables))
    ):
        raise ValueError(f"an error body nginx cannot quote as it is: {text}")
    return "'" + text + "'"


def _answer(
    errors: Errors, error: ApiError, request_id: str, indent: str, variables: tuple[str, ...] = ()
) -> list[str]:
    """The directives that send `error`, as `errors` (the spec's) word it (add_header is not
    inherited into an `if`: each block names all)."""
    headers = {"X-Request-Id": request_id, **errors.headers(error)}
    if isinstance(error, MethodNotAllowed):
        headers["Allow"] = f'"{", ".join(error.allow)}"'
    return [f"{indent}add_header {k} {v} always;" for k, v in headers.items()] + [
        f"{indent}return {errors.status(error)} {_literal(errors, error, request_id, variables)};"
    ]


def _route_answer(contract: Contract, method: str, path: str) -> ApiError:
    try:
        contract.match_route(method, path)
    except ApiError as error:
        return error
    raise ValueError(f"the spec declares {method} {path}, which nginx refuses itself")


def nginx_errors(api: Spec) -> str:
    """The nginx file for the API's `server` block (`include acs-errors.conf;`)."""
    contract = Contract(api)
    errors = contract.errors
    rid = api.request_id["prefix"] + REQUEST_ID
    out = [
        f"# Written by `python -m reference_impl.front` from openapi.yaml {api.version}: "
        "do not edit.",
        "# The front's own refusals in the API's error shape (reference_impl/DEPLOY.md, Fronts).",
        "# `=`: the status is the one the page returns (the API's), not nginx's. A URI, not a named",
        "# location: nginx will not send a request whose request line it could not parse to a named one.",
        "",
    ]
    out += [
        f"error_page {' '.join(map(str, codes))} = {PREFIX}{name};"
        for name, (codes, _) in PAGES.items()
    ]
    out += [
        "# 405: nginx refuses TRACE itself; 404: a request for one of the pages below.",
        "error_page 404 405 = @acs_route;",
        "",
    ]
    for name, (_, make) in PAGES.items():
        out += [
            f"location = {PREFIX}{name} {{",
            "    internal;",
            "    default_type application/json;",
            *_answer(errors, make(api), rid, "    "),
            "}",
            "",
        ]
    # What the API answers on a path nginx refused the method of: 405 with Allow on a route, else 404.
    out += [
        "location @acs_route {",
        "    default_type application/json;",
        f'    set {PATH} "{api.messages["cut_mark"]}";',
        f'    if ($uri ~ "{SAFE_PATH % api.caps["quoted_chars"]}") {{ set {PATH} $uri; }}',
    ]
    for path in sorted({r.path for r in api.routes}):
        out += [
            f"    if ($uri = {path}) {{",
            *_answer(errors, _route_answer(contract, "TRACE", path), rid, "        "),
            "    }",
        ]
    unknown = NotFound.from_template("not_found", method=SpecText(METHOD), path=SpecText(PATH))
    out += [*_answer(errors, unknown, rid, "    ", (METHOD, PATH)), "}"]
    return "\n".join(out) + "\n"


INGRESS_HEAD = """\
# ingress-nginx in front of the API: the settings of reference_impl/deploy/nginx/acs-api.conf
# (DEPLOY.md, "Fronts"). Written by `python -m reference_impl.front --ingress` from openapi.yaml
# {version}: do not edit.
#
# The controller's ConfigMap: its server-snippet goes into every server block, the default
# server's included, since nginx answers a request it cannot parse from the default server.
# Snippets are off by default since ingress-nginx 1.9: allow-snippet-annotations and
# annotations-risk-level below turn them on (merge these keys into your controller's ConfigMap).
"""
BODY_CAP = (
    "9m"  # proxy-body-size: above the API's own cap (x-caps.max_body_bytes), as acs-api.conf's
)
PROXY_TIMEOUT = "900"


class _Dumper(yaml.SafeDumper):
    """The manifests as people write them: a multi-line string (the snippet) as a literal block."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def ingress_nginx(api: Spec) -> str:
    """ingress-nginx's ConfigMap and an Ingress for the API's Service (k8s/api.yaml)."""
    body_read = str(api.caps["body_read_seconds"])
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx"},
        "data": {
            "allow-snippet-annotations": "true",
            "annotations-risk-level": "Critical",
            "proxy-body-size": BODY_CAP,
            "client-body-timeout": body_read,
            "client-header-timeout": body_read,
            "large-client-header-buffers": "4 16k",
            "server-snippet": "\n".join(line.rstrip() for line in nginx_errors(api).splitlines())
            + "\n",
        },
    }
    annotation = "nginx.ingress.kubernetes.io/"
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "acs-api",
            "annotations": {
                annotation + "proxy-body-size": BODY_CAP,
                annotation + "proxy-buffering": "off",
                annotation + "proxy-http-version": "1.1",
                annotation + "proxy-read-timeout": PROXY_TIMEOUT,
                annotation + "proxy-send-timeout": PROXY_TIMEOUT,
            },
        },
        "spec": {
            "ingressClassName": "nginx",
            "rules": [
                {
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "acs-api", "port": {"number": 80}}},
                            }
                        ]
                    }
                }
            ],
        },
    }
    return INGRESS_HEAD.format(version=api.version) + yaml.dump_all(
        [config_map, ingress],
        Dumper=_Dumper,
        sort_keys=False,
        width=float("inf"),
        allow_unicode=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--ingress"]):
        sys.stderr.write("usage: python -m reference_impl.front [--ingress]\n")
        return 2
    sys.stdout.write((ingress_nginx if args else nginx_errors)(default_spec()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
