"""The core: openapi.yaml turned into strict validation, caps and error bodies.

It does no I/O beyond reading the spec, and imports no web framework, HTTP client
or vLLM (ARCHITECTURE.md). `Contract(spec)` is the core built over one Spec;
`spec()` (openapi.yaml, loaded once) is only the entry points' default.
"""

from typing import TYPE_CHECKING, Any

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
from contract.spec import ModelInfo, Spec, SpecError, load_spec, spec

if TYPE_CHECKING:
    from contract.api import Contract
    from contract.request import CompletionRequest, parse_json
    from contract.tensors import SteeringVector, encode_tensor

# The validating core reads steering vectors with numpy, which the servers install ([mock],
# [reference]); a CI gate ([conformance]) reads only the spec and installs no numpy: these names
# load on first use (PEP 562), so `from contract import Spec` imports none of them.
LAZY = {
    "Contract": "contract.api",
    "CompletionRequest": "contract.request",
    "parse_json": "contract.request",
    "SteeringVector": "contract.tensors",
    "encode_tensor": "contract.tensors",
}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module 'contract' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value
    return value


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
