"""The mock's app: the API server (api_server/) over the fake engine, with the mock's
faults, simulated latency and load model as its hook, and vLLM's metrics beside the API's."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Flask

from api_server import Engine, served_models
from api_server import create_app as create_api_app
from contract import ModelInfo, Spec, spec
from mock_server.config import MockConfig
from mock_server.engine.fake_engine import FakeEngine
from mock_server.gateway import Gateway
from mock_server.hook.faults import Faults


def create_app(
    config: MockConfig | None = None,
    engine: Engine | None = None,
    models: Mapping[str, ModelInfo] | None = None,
    api: Spec | None = None,
) -> Flask:
    """The mock (MockConfig.from_env() when no config is given); `engine` replaces the
    fake one, `models` the spec's models (config.max_model_len still applies on top)."""
    # Imported now, after serve.prepare: api_server/metrics.py says why.
    from api_server.metrics import new_registry
    from mock_server.hook.metrics import VllmMetrics

    config = config if config is not None else MockConfig.from_env()
    api = api if api is not None else spec()
    served = served_models(api, config, models)
    if engine is None:
        engine = FakeEngine(api, served.values(), config.eos_rate)
    registry = new_registry()
    hook = Faults(
        config,
        api,
        None if config.disable_log_stats else VllmMetrics(registry, served.values(), api.metrics),
    )
    app = create_api_app(config, engine, models, hook, api, registry)

    def reset_fail_counts() -> tuple[str, int]:
        hook.seen.reset()
        return "", 204

    # in front of everything the app does, as a gateway stands (Flask's way to wrap its app)
    app.wsgi_app = Gateway(app.wsgi_app, api)  # type: ignore[method-assign]
    # The mock's own route, as /metrics is the server's: no part of the API, so no key.
    app.add_url_rule(
        api.mock_faults["reset_path"],
        "mockResetFailCounts",
        reset_fail_counts,
        methods=["DELETE"],
        provide_automatic_options=False,
    )
    return app
