"""The core: openapi.yaml turned into strict validation, caps and error bodies.

It does no I/O beyond reading the spec once, and imports no web framework,
HTTP client or vLLM (ARCHITECTURE.md).
"""
from contract.budget import Hold, hold
from contract.errors import (
    ApiError, ChatRefused, ContextLengthExceeded, DeadlineExceeded, DeadlineInfeasible,
    InferenceUnavailable, InsufficientQuota, InternalError, InvalidApiKey, InvalidJson,
    InvalidRequest, InvalidType, MethodNotAllowed, MissingField, ModelNotFound, NotFound,
    OutOfRange, RequestTooLarge, RuleViolation, UnknownField, UnsupportedMediaType,
    error_for_status, new_request_id,
)
from contract.request import CompletionRequest, iter_errors, parse_json, prepare_validation, validate_completion
from contract.spec import ModelInfo, Spec, SpecError, load_spec, spec
from contract.steering import SteeringVector, encode_tensor

__all__ = [
    "ApiError", "ChatRefused", "CompletionRequest", "ContextLengthExceeded", "DeadlineExceeded",
    "DeadlineInfeasible", "Hold", "InferenceUnavailable", "InsufficientQuota", "InternalError",
    "InvalidApiKey", "InvalidJson", "InvalidRequest", "InvalidType", "MethodNotAllowed",
    "MissingField", "ModelInfo", "ModelNotFound", "NotFound", "OutOfRange", "RequestTooLarge",
    "RuleViolation", "Spec", "SpecError", "SteeringVector", "UnknownField",
    "UnsupportedMediaType", "encode_tensor", "error_for_status", "hold", "iter_errors", "load_spec",
    "new_request_id", "parse_json", "prepare_validation", "spec", "validate_completion",
]
