"""The core: openapi.yaml turned into strict validation, caps and error bodies.

It does no I/O beyond reading the spec, and imports no web framework, HTTP client
or vLLM (ARCHITECTURE.md). `Contract(spec)` is the core built over one Spec;
`spec()` (openapi.yaml, loaded once) is only the entry points' default.
"""

from contract.api import Contract
from contract.budget import Hold, hold
from contract.errors import (
    ApiError,
    ChatRefused,
    ContextLengthExceeded,
    DeadlineExceeded,
    DeadlineInfeasible,
    Errors,
    InferenceUnavailable,
    InsufficientQuota,
    InternalError,
    InvalidApiKey,
    InvalidJson,
    InvalidRequest,
    InvalidType,
    Message,
    MethodNotAllowed,
    MissingField,
    ModelNotFound,
    NotFound,
    OutOfRange,
    RequestTooLarge,
    RuleViolation,
    UnknownField,
    UnsupportedMediaType,
    UnsupportedTransferCoding,
)
from contract.metrics import MetricsContract
from contract.request import CompletionRequest, parse_json
from contract.spec import ModelInfo, Spec, SpecError, load_spec, spec
from contract.tensors import SteeringVector, encode_tensor

__all__ = [
    "ApiError",
    "ChatRefused",
    "CompletionRequest",
    "ContextLengthExceeded",
    "Contract",
    "DeadlineExceeded",
    "DeadlineInfeasible",
    "Errors",
    "Hold",
    "InferenceUnavailable",
    "InsufficientQuota",
    "InternalError",
    "InvalidApiKey",
    "InvalidJson",
    "InvalidRequest",
    "InvalidType",
    "Message",
    "MetricsContract",
    "MethodNotAllowed",
    "MissingField",
    "ModelInfo",
    "ModelNotFound",
    "NotFound",
    "OutOfRange",
    "RequestTooLarge",
    "RuleViolation",
    "Spec",
    "SpecError",
    "SteeringVector",
    "UnknownField",
    "UnsupportedMediaType",
    "UnsupportedTransferCoding",
    "encode_tensor",
    "hold",
    "load_spec",
    "parse_json",
    "spec",
]
