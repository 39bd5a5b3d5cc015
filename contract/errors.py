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
    ├── UnsupportedTransferCoding 501 unsupported_transfer_coding
    ├── InferenceUnavailable      503 inference_unavailable
    └── DeadlineExceeded          504 deadline_exceeded

A class names its code; the status and type of a code are read from the spec
(x-error-codes). `error_class` maps a code to its class, from this tree (tests
check the drawing against it). An error needs no spec to be raised: its message is
its exact text, or a `Message` (a template of the spec and its fields). `Errors`,
built from one spec, is what reads the spec for it: it fills the message and turns
the error into the API's error shape (`Errors.body`, the one place).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

if TYPE_CHECKING:
    from contract.spec import Spec


class SpecText(str):
    """Text the core composed from the spec (a steering vector's reason, what a field
    expects): a message quotes it whole. Every other string field is an input value."""


@dataclass(frozen=True)
class Message:
    """An error's message as the spec words it: the x-messages template `key`, or a
    template's own `text` (a rule's, a range's), with the `fields` that fill it. The
    spec object the error reaches (`Errors`) fills it; a field that is a Message is
    filled first and quoted whole."""

    key: str = ""
    text: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.key or self.text


class ApiError(Exception):
    """An error of the API: its code (a class attribute), its message (the exact text, or a
    Message the spec words) and its param. What the spec decides about it (the message's
    words, the status, type and headers of its code) `Errors` reads from the spec object."""

    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str | Message, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers: dict[str, str] = {}  # over its code's (the mock's X-Mock-Retry-After)

    @classmethod
    def from_template(cls, key: str, param: str | None = None, /, **fields: Any) -> Self:
        """The error whose message is the x-messages template named `key`."""
        return cls(Message(key=key, fields=fields), param)

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

    def __init__(self, message: str | Message, param: str | None = None, rule: str = "") -> None:
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

    def __init__(
        self, message: str | Message, param: str | None = None, allow: tuple[str, ...] = ()
    ) -> None:
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


class UnsupportedTransferCoding(ApiError):
    code = "unsupported_transfer_coding"


class InferenceUnavailable(ApiError):
    code = "inference_unavailable"


class DeadlineExceeded(ApiError):
    code = "deadline_exceeded"


def raise_first(errors: Iterable[ApiError]) -> None:
    """Raise the first of `errors`; return when there is none."""
    for error in errors:
        try:
            raise error
        finally:  # else this frame, in the error's traceback, holds the error: a cycle left to the gc
            del error


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
        code: cls
        for sub in ApiError.__subclasses__()
        if sub is not InvalidRequest
        for code, cls in _codes(sub).items()
    }


@cache
def rule_classes() -> dict[str, type[RuleViolation]]:
    """A rule's `code` in the spec -> the class that raises it: RuleViolation's subtree."""
    return cast("dict[str, type[RuleViolation]]", _codes(RuleViolation))


def error_class(code: str) -> type[ApiError]:
    return code_classes()[code]


def rule_error(rule: dict[str, Any], param: str | None = None, /, **fields: Any) -> RuleViolation:
    """The error for a spec rule (x-rules, x-model-rules, x-token-rules entry)."""
    cls = rule_classes()[rule["code"]]
    return cls(
        Message(text=rule["message"], fields=fields), param or rule.get("param"), rule=rule["id"]
    )


def _int_text(value: int, limit: int) -> str:
    """An int's decimal form, or its sign and leading digits when it has far more than `limit`
    of them: a number from the body (or a product of them, a budget's total) can be past
    Python's 4,300-digit limit on int to str, which raises rather than prints."""
    # `value` has at least `floor` digits; under limit + a margin, str is cheap and allowed
    floor = int((value.bit_length() - 1) * math.log10(2)) + 1 if value else 1
    if floor <= limit + 2:
        return str(value)
    lead = abs(value) // 10 ** (floor - limit - 1)  # more than `limit` digits: it is cut
    return ("-" if value < 0 else "") + str(lead)


class Errors:
    """One spec's side of the errors: the words of each message, the status, type and
    headers of each code, the request ids. An error becomes a body here (`body`), the
    one place; a message is filled here (`message`), the one place, every input value
    cut to x-caps.quoted_chars characters (and every param: it can name an unknown key)."""

    def __init__(self, api: Spec) -> None:
        self.api = api
        self.messages: dict[str, Any] = api.messages
        self.codes = api.error_codes
        self._limit, self._mark = api.caps["quoted_chars"], api.messages["cut_mark"]
        self._prefix, self._digits = api.request_id["prefix"], api.request_id["hex_digits"]
        # each code's status, type and headers, read once: every refused request needs them
        self._codes = {
            code: (int(v["status"]), str(v["type"]), api.error_headers(code))
            for code, v in self.codes.items()
        }

    def new_request_id(self) -> str:
        """`req_` + 32 lowercase hex digits (x-request-id). An id labels a request in logs and
        answers; it is no secret, so the random module's generator makes it (no system call;
        `random` reseeds it in every forked worker)."""
        return self._prefix + format(random.getrandbits(4 * self._digits), f"0{self._digits}x")

    def cut(self, value: str) -> str:
        """An input value as an error may quote it: at most x-caps.quoted_chars characters,
        then x-messages.cut_mark. A 1 MB model name must not come back in a 1 MB body."""
        return value if len(value) <= self._limit else value[: self._limit] + self._mark

    def fill(self, message: Message) -> str:
        """A Message in the spec's words: string fields are input values, cut."""
        template = self.messages[message.key] if message.key else message.text
        return template.format(**{k: self._field(v) for k, v in message.fields.items()})

    def _field(self, value: Any) -> Any:
        if isinstance(value, Message):
            return SpecText(self.fill(value))
        if type(value) is int:
            return self.cut(_int_text(value, self._limit))
        return self.cut(value) if type(value) is str else value

    def message(self, error: ApiError) -> str:
        m = error.message
        return m if isinstance(m, str) else self.fill(m)

    def param(self, error: ApiError) -> str | None:
        return None if error.param is None else self.cut(error.param)

    def status(self, error: ApiError) -> int:
        return self._codes[error.code][0]

    def type(self, error: ApiError) -> str:
        return self._codes[error.code][1]

    def headers(self, error: ApiError) -> dict[str, str]:
        """Headers the response carries besides X-Request-Id (x-should-retry, Retry-After)."""
        spec_headers: dict[str, str] = self._codes[error.code][2]
        return {**spec_headers, **error.headers} if error.headers else spec_headers

    def body(self, error: ApiError, request_id: str) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message(error),
                "type": self.type(error),
                "param": self.param(error),
                "code": error.code,
            },
            "request_id": request_id,
        }
