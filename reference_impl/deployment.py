"""The deployment's model: the spec's entry for the served name, with this deployment's numbers.

The API checks layers, steering vectors and captures against the model that
really runs, so a deployment overrides the spec's num_layers and hidden_size
with the model's config.json, and max_model_len with what vLLM reports in
GET /v1/models (the deployment's to set). The vocabulary must be the spec's:
the core counts prompt tokens with the spec's tokenizer.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from contract import ModelInfo, Spec
from reference_impl.wire import get


class DeploymentError(Exception):
    """The served model does not fit the spec, or vLLM does not serve it."""


def read_model_config(model: str | None) -> dict[str, Any] | None:
    """config.json of a local model directory; None for a hub id (the spec's numbers hold)."""
    if not model:
        return None
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def upstream_models(base_url: str, timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    """vLLM's GET /v1/models: served name -> its entry (id, root, max_model_len, ...)."""
    url = base_url.rstrip("/") + "/v1/models"
    status, body = get(url, timeout)
    if status != 200:
        raise DeploymentError(f"{url} answered {status}: {body[:200]!r}")
    return {m["id"]: m for m in json.loads(body)["data"]}


def pick_upstream(entries: dict[str, dict[str, Any]], served_name: str) -> dict[str, Any]:
    """The upstream entry for the API's model: the same name, or vLLM's only model."""
    if served_name in entries:
        return entries[served_name]
    if len(entries) == 1:
        return next(iter(entries.values()))
    raise DeploymentError(f"vLLM serves {sorted(entries)}, none named {served_name!r}")


def deployment_models(
    served_name: str, max_model_len: int, config: dict[str, Any] | None, api: Spec
) -> dict[str, ModelInfo]:
    """The models this deployment serves (one): `api`'s entry, its numbers overridden."""
    base = api.models.get(served_name)
    if base is None:
        raise DeploymentError(
            f"{served_name!r} is not a model of openapi.yaml (x-models: {', '.join(api.models)})"
        )
    overrides: dict[str, Any] = {"max_model_len": int(max_model_len)}
    if config is not None:
        config = config.get("text_config", config)
        if config.get("vocab_size") != base.vocab_size:
            raise DeploymentError(
                f"the model's vocab_size {config.get('vocab_size')} is not "
                f"{served_name}'s {base.vocab_size}: the core would count tokens wrongly"
            )
        overrides.update(
            num_layers=int(config["num_hidden_layers"]), hidden_size=int(config["hidden_size"])
        )
    return {served_name: dataclasses.replace(base, **overrides)}
