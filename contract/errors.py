"""One hierarchy for every error the API returns.

    ApiError
    ├── InvalidRequest            400 invalid_request
    │   ├── UnknownField
    │   ├── MissingField
    │   ├── InvalidType
    │   ├── OutOfRange
    │   ├── RuleViolation         (x-rules, x-model-rules, size caps)
    │   └── ChatRefused
    ├── DeadlineInfeasible        400 deadline_infeasible
    ├── ContextLengthExceeded     400 context_length_exceeded
    ├── InvalidJson               400 invalid_json
    ├── InvalidApiKey             401
    ├── NotFound                  404 not_found
    ├── ModelNotFound             404 model_not_found
    ├── MethodNotAllowed          405 (carries `allow`)
    ├── RequestTooLarge           413
    ├── UnsupportedMediaType      415
    ├── InsufficientQuota         429
    ├── InternalError             500
    ├── InferenceUnavailable      503
    └── DeadlineExceeded          504

A class names its code; the status and type of a code are read from the spec
(x-error-codes). The text of an error is its exact message. `body()` is the one
place an error becomes the API's error shape.
"""
from __future__ import annotations

import secrets
from typing import Any, ClassVar

from contract.spec import spec


def new_request_id() -> str:
    """`req_` + 32 lowercase hex digits (x-request-id)."""
    rid = spec().request_id
    return rid["prefix"] + secrets.token_hex(rid["hex_digits"] // 2)


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


# A rule's `code` in the spec picks the class that raises it.
RULE_CLASSES: dict[str, type[RuleViolation]] = {
    "invalid_request": RuleViolation,
    "deadline_infeasible": DeadlineInfeasible,
    "context_length_exceeded": ContextLengthExceeded,
}


def rule_error(rule: dict[str, Any], param: str | None = None, /, **fields: Any) -> RuleViolation:
    """The error for a spec rule (x-rules, x-model-rules, x-token-rules entry)."""
    cls = RULE_CLASSES[rule["code"]]
    return cls(fill(rule["message"], **fields), param or rule.get("param"), rule=rule["id"])


def error_for_status(status: int, message: str, param: str | None = None) -> ApiError:
    """An error of the class whose code has this status (for foreign errors at the edge)."""
    for cls in (InvalidRequest, InvalidApiKey, NotFound, MethodNotAllowed, RequestTooLarge,
                UnsupportedMediaType, InsufficientQuota, InferenceUnavailable, DeadlineExceeded):
        if spec().error_codes[cls.code]["status"] == status:
            return cls(message, param)
    return InternalError(spec().messages["internal_error"])
