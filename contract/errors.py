"""One hierarchy for every error the API returns.

    ApiError                      (code: internal_error, InternalError's below)
    ├── InvalidRequest            400 invalid_request
    │   ├── UnknownField
    │   ├── MissingField
    │   ├── InvalidType
    │   ├── OutOfRange
    │   ├── RuleViolation         (x-rules, x-model-rules, x-token-rules, size caps)
    │   │   ├── DeadlineInfeasible        400 deadline_infeasible
    │   │   └── ContextLengthExceeded     400 context_length_exceeded
    │   └── ChatRefused
    ├── InvalidJson               400 invalid_json
    ├── InvalidApiKey             401 invalid_api_key
    ├── NotFound                  404 not_found
    ├── ModelNotFound             404 model_not_found
    ├── MethodNotAllowed          405 method_not_allowed (carries `allow`)
    ├── RequestTooLarge           413 request_too_large
    ├── UnsupportedMediaType      415 unsupported_media_type
    ├── InsufficientQuota         429 insufficient_quota
    ├── InternalError             500 internal_error
    ├── InferenceUnavailable      503 inference_unavailable
    └── DeadlineExceeded          504 deadline_exceeded

A class names its code; the status and type of a code are read from the spec
(x-error-codes). `error_class` maps a code to its class, from this tree (tests
check the drawing against it). The text of an error is its exact message. `body()` is the one
place an error becomes the API's error shape.
"""
from __future__ import annotations

import random
from functools import cache
from typing import Any, ClassVar, cast

from contract.spec import spec


def new_request_id() -> str:
    """`req_` + 32 lowercase hex digits (x-request-id). An id labels a request in logs and
    answers; it is no secret, so the random module's generator makes it (no system call;
    `random` reseeds it in every forked worker)."""
    rid = spec().request_id
    digits = rid["hex_digits"]
    return rid["prefix"] + format(random.getrandbits(4 * digits), f"0{digits}x")


class SpecText(str):
    """Text the core composed from the spec (a steering vector's reason, what a field
    expects): `fill` quotes it whole. Every other string field is an input value."""


def cut(value: str) -> str:
    """An input value as an error may quote it: at most x-caps.quoted_chars characters,
    then x-messages.cut_mark. A 1 MB model name must not come back in a 1 MB body."""
    limit = spec().caps["quoted_chars"]
    return value if len(value) <= limit else value[:limit] + spec().messages["cut_mark"]


def fill(template: str, **fields: Any) -> str:
    """The one place a message template is filled: string fields are input values, cut."""
    return template.format(**{k: v if type(v) is not str else cut(v) for k, v in fields.items()})


class ApiError(Exception):
    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = None if param is None else cut(param)   # a param can name an unknown key

    @classmethod
    def from_template(cls, key: str, param: str | None = None, **fields: Any) -> "ApiError":
        """Build the error from the x-messages template named `key`."""
        return cls(fill(spec().messages[key], **fields), param)

    @property
    def status(self) -> int:
        return spec().error_codes[self.code]["status"]

    @property
    def type(self) -> str:
        return spec().error_codes[self.code]["type"]

    @property
    def headers(self) -> dict[str, str]:
        """Headers the response carries besides X-Request-Id (x-should-retry, Retry-After)."""
        return spec().error_headers(self.code)

    def body(self, request_id: str) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type,
                      "param": self.param, "code": self.code},
            "request_id": request_id,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, param={self.param!r})"


class InvalidRequest(ApiError):
    code = "invalid_request"


class UnknownField(InvalidRequest):
    pass


class MissingField(InvalidRequest):
    pass


class InvalidType(InvalidRequest):
    pass


class OutOfRange(InvalidRequest):
    pass


class RuleViolation(InvalidRequest):
    """A cross-field, model or size-cap rule; `rule` is its id in the spec."""

    def __init__(self, message: str, param: str | None = None, rule: str = "") -> None:
        super().__init__(message, param)
        self.rule = rule


class ChatRefused(InvalidRequest):
    pass


class DeadlineInfeasible(RuleViolation):
    code = "deadline_infeasible"


class ContextLengthExceeded(RuleViolation):
    code = "context_length_exceeded"


class InvalidJson(ApiError):
    code = "invalid_json"


class InvalidApiKey(ApiError):
    code = "invalid_api_key"


class NotFound(ApiError):
    code = "not_found"


class ModelNotFound(ApiError):
    code = "model_not_found"


class MethodNotAllowed(ApiError):
    code = "method_not_allowed"

    def __init__(self, message: str, param: str | None = None, allow: tuple[str, ...] = ()) -> None:
        super().__init__(message, param)
        self.allow = allow


class RequestTooLarge(ApiError):
    code = "request_too_large"


class UnsupportedMediaType(ApiError):
    code = "unsupported_media_type"


class InsufficientQuota(ApiError):
    code = "insufficient_quota"


class InternalError(ApiError):
    code = "internal_error"


class InferenceUnavailable(ApiError):
    code = "inference_unavailable"


class DeadlineExceeded(ApiError):
    code = "deadline_exceeded"


def _codes(root: type[ApiError]) -> dict[str, type[ApiError]]:
    """code -> the most general class under `root` (root included) that has it,
    walked breadth first: UnknownField shares InvalidRequest's code, and
    InvalidRequest is the class of that code."""
    out: dict[str, type[ApiError]] = {}
    level: list[type[ApiError]] = [root]
    while level:
        for cls in level:
            out.setdefault(cls.code, cls)
        level = [sub for cls in level for sub in cls.__subclasses__()]
    return out


@cache
def code_classes() -> dict[str, type[ApiError]]:
    """The one code -> class table of the API's errors (every code of x-error-codes)."""
    return _codes(InvalidRequest) | {
        code: cls for sub in ApiError.__subclasses__() if sub is not InvalidRequest
        for code, cls in _codes(sub).items()}


@cache
def rule_classes() -> dict[str, type[RuleViolation]]:
    """A rule's `code` in the spec -> the class that raises it: RuleViolation's subtree."""
    return cast("dict[str, type[RuleViolation]]", _codes(RuleViolation))


def error_class(code: str) -> type[ApiError]:
    return code_classes()[code]


def rule_error(rule: dict[str, Any], param: str | None = None, /, **fields: Any) -> RuleViolation:
    """The error for a spec rule (x-rules, x-model-rules, x-token-rules entry)."""
    cls = rule_classes()[rule["code"]]
    return cls(fill(rule["message"], **fields), param or rule.get("param"), rule=rule["id"])


def error_for_status(status: int, message: str, param: str | None = None) -> ApiError:
    """An error of the first code (in x-error-codes) with this status, for foreign errors
    at the edge; a 500 or a status the API has no code for is internal_error, with the
    API's own message (a foreign one is not shown)."""
    code = next((c for c, v in spec().error_codes.items() if v["status"] == status), None)
    if code is None or code == InternalError.code:
        return InternalError(spec().messages["internal_error"])
    return error_class(code)(message, param)
