"""What the API sends vLLM for one request that the core has accepted.

Everything that decides the output is explicit, so vLLM never falls back to
its own defaults (16 tokens) or to the model's generation_config.json:
max_tokens is the Hold's, and every field that openapi.yaml gives an
`x-default` is sent with that value when the client left it out. The prompts
go as the token ids the core counted, so the Hold, the caps and vLLM see the
same tokens. The vllm-lens fields go inside vllm_xargs, in the form vllm-lens
reads (steering vectors as one JSON string). Nothing else from the client is
sent: the body holds only fields of openapi.yaml, because the core refused
the rest.

A steered request goes with a `cache_salt` derived from its steering. vLLM
caches every full KV block of a prompt under a hash of its tokens (and of a
salt, LoRA, multimodal data), never of vllm-lens's steering; vllm-lens makes a
steered request skip *reading* the cache but not writing it, so without the
salt its steered blocks would be read by the next plain request of the same
prompt (DEPLOY.md, "Prefix caching"). The salt is a hash of the vectors as
sent, so identical steering keeps one hash and plain requests another. A
capture needs no salt: vllm-lens makes it skip reading too (its whole prompt
runs, so it is captured whole), and what it writes is the plain stream's.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from contract import CompletionRequest, Spec


@cache
def copied(api: Spec) -> frozenset[str]:
    """The fields sent to vLLM as the client sent them (x-kind vllm: body). The others are set
    below from the accepted request (set), go inside vllm_xargs (xargs), were applied by the
    core to the token ids already and vLLM would apply them twice (core), or mean nothing to
    vLLM and may be megabytes long (none: OpenAI's end-user id)."""
    return frozenset(api.request_fields("vllm", "body"))


@cache
def request_defaults(api: Spec) -> dict[str, Any]:
    """Every copied CompletionRequest field with an x-default in `api`."""
    defaults = api.defaults("CompletionRequest")
    return {k: v for k, v in defaults.items() if k in copied(api)}


STEERING = "apply_steering_vectors"  # its vectors go as vllm-lens reads them (_vector)
STEERING_SALT = "acs-steering-"  # + the vectors' sha256; vLLM allows 128 characters, no '/'


def upstream_body(
    req: CompletionRequest, model: str, api: Spec, *, isolate_steering: bool = True
) -> dict[str, Any]:
    """The JSON body for vLLM's POST /v1/completions (req.max_tokens is the Hold's), with
    `s`'s defaults; `isolate_steering` False leaves a steered request unsalted (tests
    only: that is how the leak is shown)."""
    body = dict(request_defaults(api))
    body.update((k, v) for k, v in req.body.items() if k in copied(api))
    body["model"] = model
    body["prompt"] = req.prompts[0] if len(req.prompts) == 1 else req.prompts
    body["max_tokens"] = req.max_tokens
    body["stream"] = (
        req.stream
    )  # vLLM streams when the client's request streams (engine.py says why)
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}  # the Budget settles on it
    # Always: the Budget counts generated tokens as they pass, and echo's text is ours
    # (vLLM leaves the prompt out of an echo when it returns token ids).
    body["return_token_ids"] = True
    if "priority" in req.body:  # the one field that may come as a string of an integer
        body["priority"] = int(req.body["priority"])
    xargs: dict[str, Any] = {
        name: req.body[name]
        for name in api.request_fields("vllm", "xargs")
        if name in req.body and name != STEERING
    }
    if req.steering:
        vectors = json.dumps([_vector(v.wire, api) for v in req.steering])
        xargs[STEERING] = vectors
        if isolate_steering:
            body["cache_salt"] = STEERING_SALT + hashlib.sha256(vectors.encode()).hexdigest()
    if xargs:
        body["vllm_xargs"] = xargs
    return body


def _vector(wire: dict[str, Any], api: Spec) -> dict[str, Any]:
    """A steering vector as vllm-lens's model reads it: its nulls are defaults there."""
    return {**api.defaults("SteeringVector"), **{k: v for k, v in wire.items() if v is not None}}
