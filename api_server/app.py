"""The Flask app factory: the HTTP edge around the core and an engine.

Every request gets a request id first; `preflight` (the core) then decides
route, auth, body size and media type, in the view's wrapper (`_admitted`). A
path or method that no route takes is decided by the same core function
(`match_route`, preflight's first stage) in the routing error's handler, so a
404 or 405 has the API's body too. Every error leaves through `_error_response`,
the one place an error becomes a response; werkzeug's exceptions and
unexpected ones are translated there, once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from api_server.budget import open_budget
from api_server.completions import create_completion, stall_bound
from api_server.config import EVERY_MODEL, ServerConfig
from api_server.engine import Engine
from api_server.hooks import Hook
from api_server.patches import flask_class
from api_server.responses import CLAMPED, JSON, REQUEST_ID, dumps
from api_server.state import STATE, State, state
from contract import (
    ApiError,
    ChatRefused,
    Contract,
    InferenceUnavailable,
    InternalError,
    InvalidRequest,
    ModelInfo,
    RequestTooLarge,
    Spec,
    spec,
)

if TYPE_CHECKING:  # (imported by create_app: api_server/metrics.py says why)
    from prometheus_client import CollectorRegistry

log = logging.getLogger("api_server")

METRICS_PATH = "/metrics"


def served_models(
    api: Spec, config: ServerConfig, served: Mapping[str, ModelInfo] | None
) -> dict[str, ModelInfo]:
    """The served models (the spec's by default), with the deployment's max_model_len."""
    models = dict(api.models if served is None else served)
    lengths = dict(config.max_model_len)
    every = lengths.pop(EVERY_MODEL, None)
    unknown = set(lengths) - set(models)
    if unknown:
        raise ValueError(f"max_model_len for unknown models: {sorted(unknown)}")
    for name in models:
        length = lengths.get(name, every)
        if length is not None:
            models[name] = dataclasses.replace(models[name], max_model_len=length)
    return models


def create_app(
    config: ServerConfig,
    engine: Engine,
    models: Mapping[str, ModelInfo] | None = None,
    hook: Hook | None = None,
    api: Spec | None = None,
    registry: CollectorRegistry | None = None,
) -> Flask:
    """A server of this API over `engine` (the mock's fake one, or vLLM).

    `models` replaces the spec's models (a deployment whose model differs from the
    spec's, say): GET /v1/models and validation use them; config.max_model_len
    still applies on top. `hook` adds what the API itself does not do (the mock's
    faults and latency); a server of the real API passes none. `api` is the spec
    (spec() by default): the app's Contract, built from it here, is what every request
    is checked and every error worded by. `registry` holds the app's metrics (GET /metrics), and
    any the server adds (a new one by default)."""
    if not isinstance(engine, Engine):  # its capabilities are Engine's methods: fail at start
        raise TypeError(
            f"{type(engine).__name__} is not an api_server.Engine (api_server/engine.py)"
        )
    api = api if api is not None else spec()
    config = config.for_spec(api)  # what the config leaves to the spec is this app's spec's
    headers = api.response_headers
    if REQUEST_ID not in headers or CLAMPED not in headers:
        raise RuntimeError("openapi.yaml lacks the response headers the server sends")
    models = served_models(api, config, models)
    contract = Contract(api)
    contract.prepare()  # here, in gunicorn's master: once, not in each worker's first request
    app = flask_class()(
        __name__
    )  # Flask, or Flask with its URL map bound more cheaply (patches.py)
    # No MAX_CONTENT_LENGTH: werkzeug's would refuse a chunked body of exactly the cap;
    # completions.read_body cuts a chunked body off at the cap itself.
    # Imported now, not with this module: api_server/metrics.py says why.
    from api_server.metrics import ApiMetrics, new_registry

    registry = registry if registry is not None else new_registry()
    app.extensions[STATE] = State(
        contract,
        config,
        models,
        engine,
        open_budget(config),
        hook,
        int(time.time()),
        ApiMetrics(registry),
    )
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    views = {
        "createCompletion": create_completion,
        "createChatCompletion": _chat,
        "listModels": _list_models,
        "health": _health,
    }
    # The routes are the spec's paths; an operation without a view is a startup error.
    # No automatic OPTIONS answer: a method the spec does not list is a 405 like any other.
    # No redirect of `/v1//completions` to `/v1/completions` (werkzeug's merge_slashes): a
    # redirect skips the error handlers, and the spec knows no such path (404).
    app.url_map.merge_slashes = False
    for route in api.routes:
        app.add_url_rule(
            route.path,
            route.operation_id,
            _admitted(views[route.operation_id]),
            methods=[route.method],
            provide_automatic_options=False,
        )
    # The server's, not the API's (as vLLM's /metrics is no part of OpenAI's API): no key.
    app.add_url_rule(
        METRICS_PATH, "metrics", _metrics, methods=["GET"], provide_automatic_options=False
    )
    return app


def _admitted(view: Callable[[], Response]) -> Callable[[], Response]:
    """The view, behind the request id and preflight, with an ApiError answered on the
    spot. (As Flask's before_request and after_request hooks this cost 15 us a request;
    raised on to Flask, an ApiError would take `handle_user_exception` and a walk of the
    error handler registry to reach `_api_error`, which answers the same.)"""

    @functools.wraps(view)
    def admitted() -> Response:
        s = state()
        rid = g.request_id = s.contract.errors.new_request_id()
        # `request` is a context-local proxy: each attribute read looks the request up again.
        req = request._get_current_object()  # type: ignore[attr-defined]
        try:
            # werkzeug's Headers is the case-insensitive mapping preflight wants, though not a Mapping subclass.
            g.api_key = s.contract.preflight(
                req.method,
                req.path,
                cast(Mapping[str, str], req.headers),
                req.content_length,
                s.config.keys,
            ).key
            response = view()
        except ApiError as error:
            return _error_response(error)
        response.headers[REQUEST_ID] = rid
        s.metrics.responded(req.url_rule.rule, response.status_code)
        return response

    return admitted


# -- the edge -------------------------------------------------------------------------
def _drain(response: Response) -> None:
    """Read and drop the rest of a refused body, so that a client still sending it
    reads our 413 instead of a reset connection; past twice the cap, just close."""
    limit = 2 * state().contract.api.caps["max_body_bytes"]
    if request.content_length is not None and request.content_length > limit:
        response.headers["Connection"] = "close"
        return
    stream, dropped = request.stream, 0
    try:
        with stall_bound(request.environ):  # a client that stops sending is not waited for
            while dropped <= limit:
                chunk = stream.read(1 << 16)
                if not chunk:
                    return
                dropped += len(chunk)
    except Exception:  # a broken transfer or a stall: nothing more to read
        pass
    response.headers["Connection"] = "close"


def _error_response(error: ApiError) -> Response:
    """The one place an error becomes a response, worded by the app's Contract."""
    s = state()
    errors = s.contract.errors
    rid = g.get("request_id")
    if rid is None:
        rid = g.request_id = errors.new_request_id()
    status = errors.status(error)
    response = Response(
        dumps(errors.body(error, rid)),
        status=status,
        content_type=JSON,
        headers={**errors.headers(error), REQUEST_ID: rid},
    )
    allow = getattr(error, "allow", None)
    if allow:
        response.headers["Allow"] = ", ".join(allow)
    if g.get("close_connection"):  # a malformed body (completions.read_body)
        response.headers["Connection"] = "close"
    if isinstance(error, RequestTooLarge):
        _drain(response)
    rule = request.url_rule
    s.metrics.responded(rule.rule if rule is not None else None, status, error.code)
    return response


def _api_error(error: ApiError) -> Response:
    return _error_response(error)


def _http_error(error: HTTPException) -> Response:
    """werkzeug's own errors, as the API's: they should only come from the body read."""
    contract = state().contract
    if error.code == 413:
        limit = contract.api.caps["max_body_bytes"]
        return _error_response(RequestTooLarge.from_template("request_too_large", limit=limit))
    if error.code == 400:  # werkzeug's ClientDisconnected: the body ended before Content-Length
        return _error_response(InvalidRequest.from_template("malformed_http"))
    # Routing's own answers (404, 405, a redirect to a merged-slashes path): the path and
    # method as preflight's first stage judges them, which is what a 404 or 405 says.
    try:
        contract.match_route(request.method, request.path)
    except ApiError as api_error:
        return _error_response(api_error)
    log.error("unexpected HTTP error %s on %s %s", error.code, request.method, request.path)
    return _error_response(InternalError.from_template("internal_error"))


def _unexpected(error: Exception) -> Response:
    log.exception("internal error on %s %s (%s)", request.method, request.path, g.get("request_id"))
    return _error_response(InternalError.from_template("internal_error"))


# -- small routes ---------------------------------------------------------------------
def _json(obj: Any, status: int = 200) -> Response:
    return Response(dumps(obj), status=status, content_type=JSON)


def _metrics() -> Response:
    return Response(state().metrics.exposition(), content_type=state().metrics.content_type)


def _health() -> Response:
    if not state().engine.ready():
        raise InferenceUnavailable.from_template("inference_unavailable")
    return _json({"status": "ok"})


def _list_models() -> Response:
    s = state()
    return _json(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": s.started,
                    "owned_by": "vllm",
                    "root": m.hf_id,
                    "max_model_len": m.max_model_len,
                    "num_layers": m.num_layers,
                    "hidden_size": m.hidden_size,
                }
                for name, m in s.models.items()
            ],
        }
    )


def _chat() -> Response:
    # preflight refuses chat before any view runs; this keeps the route honest if not.
    raise ChatRefused.from_template("chat_refused")
