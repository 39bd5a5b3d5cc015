"""vLLM's errors and the client's exceptions (reference_impl/wire.py), translated once into
the API's errors.

    WireError: not reachable, a connection that
    failed, an answer that makes no sense         -> InferenceUnavailable (503)
    WireTimeout: silent past the wait             -> DeadlineExceeded (504)
    vLLM 400 (before or during a stream)          -> InvalidRequest / ContextLengthExceeded (400):
                                                     Inference's message, the public param
    any other vLLM status, an unreadable answer   -> InferenceUnavailable (503), logged

completions.md: "Inference checks the other values ... The API passes on
Inference's 400, with Inference's message and param." So a 400 keeps vLLM's
message, bounded, without the `(parameter=..., value=...)` tail (the param says
it, and the value can be the client's whole input), and its param is named as
the API names it (no `body.` prefix, no vLLM-internal names). Anything else
vLLM says stays in our log: it is about the deployment, not the request.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from contract import (
    ApiError,
    ContextLengthExceeded,
    DeadlineExceeded,
    InferenceUnavailable,
    InvalidRequest,
    Spec,
)
from reference_impl.wire import WireError, WireTimeout

log = logging.getLogger("reference_impl")

MAX_MESSAGE = 500
# vLLM's names for what the API calls otherwise.
VLLM_PARAMS = {"input_tokens": "prompt", "prompt_embeds": "prompt"}
# vLLM's params that mean the prompt (and max_tokens) do not fit the context.
CONTEXT_PARAMS = frozenset({"input_tokens"})
_TAIL = re.compile(r"\s*\(parameter=[^()]*\)\s*$")


class UpstreamError(Exception):
    """vLLM answered, but not as its API says it would (a body we cannot read)."""


def unavailable() -> ApiError:
    return InferenceUnavailable.from_template("inference_unavailable")


def deadline_exceeded(seconds: float) -> ApiError:
    return DeadlineExceeded.from_template("deadline_exceeded", seconds=round(seconds))


@cache
def _public_fields(api: Spec) -> frozenset[str]:
    return frozenset(api.schema("CompletionRequest")["properties"])


def public_param(param: Any, api: Spec) -> str | None:
    """`body.prompt.1` -> `prompt`; `input_tokens` -> `prompt`; names that are not fields
    of `s`'s request -> None."""
    if not isinstance(param, str) or not param:
        return None
    name = re.split(r"[.\[]", param.removeprefix("body."), maxsplit=1)[0]
    name = VLLM_PARAMS.get(name, name)
    return name if name in _public_fields(api) else None


def _message(text: str) -> str:
    text = _TAIL.sub("", text).strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def from_vllm(status: int, payload: Any, api: Spec) -> ApiError:
    """The API's error for vLLM's error answer (its status and parsed JSON body), the
    params named as `s` names them."""
    error = payload.get("error", payload) if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if status == 400 and isinstance(error, dict) and isinstance(message, str) and message:
        param = error.get("param")
        cls = ContextLengthExceeded if param in CONTEXT_PARAMS else InvalidRequest
        return cls(_message(message), public_param(param, api))
    log.error("vLLM answered %s: %.2000r", status, payload)
    return unavailable()


def error_status(payload: dict[str, Any]) -> int:
    """The status of an error event in vLLM's stream (its `code`)."""
    code = payload.get("error", {}).get("code") if isinstance(payload.get("error"), dict) else None
    return code if isinstance(code, int) else 500


@contextmanager
def translated(wait_seconds: float) -> Iterator[None]:
    """The client's exceptions (and unreadable answers) as the API's errors, at the engine's edge."""
    try:
        yield
    except WireTimeout as exc:  # read or write: vLLM took longer than the wait
        log.warning("vLLM did not answer within %s s: %s", wait_seconds, exc)
        raise deadline_exceeded(wait_seconds) from None
    except WireError as exc:
        log.warning("vLLM is unreachable: %s", exc)
        raise unavailable() from None
    except UpstreamError as exc:
        log.error("vLLM's answer is unreadable: %s", exc)
        raise unavailable() from None
