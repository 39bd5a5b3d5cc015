"""reference_impl/deploy: the docker-compose file and the Kubernetes manifests that
DEPLOY.md describes, kept honest. Every file parses; every option and REFERENCE_*
variable given to the API exists in its parser and parses (and gunicorn takes it);
the API points at the router and at Redis as those are declared; each vLLM replica
runs as the reference's own launcher runs vLLM; probes and graceful shutdown are in
place. vLLM's own options are checked against vLLM's parser where vLLM is installed."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from gunicorn.config import Config

from api_server.budget import REDIS_SCHEMES
from api_server.serve import gunicorn_options
from contract import spec
from reference_impl.__main__ import parser as reference_parser
from reference_impl.launcher import VllmProcess, default_python

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "reference_impl" / "deploy"
COMPOSE = DEPLOY / "docker-compose.yaml"
SERVED = spec().default_model
VLLM_MODULE = "reference_impl.vllm_server"
# The values of these differ per deployment; the launcher picks its own.
PER_DEPLOYMENT = {"--model", "--host", "--port", "--max-model-len"}


@dataclass
class Container:
    where: str  # file and service / workload
    argv: list[str]
    env: dict[str, str | None]  # None: from a Secret
    spec: dict[str, Any]  # the compose service, or the Kubernetes container

    @property
    def program(self) -> str:
        """`reference_impl`, `mock_server`, `reference_impl.vllm_server`, or the executable."""
        if "-m" in self.argv:
            return self.argv[self.argv.index("-m") + 1]
        return self.argv[0] if self.argv else ""

    @property
    def args(self) -> list[str]:
        return self.argv[self.argv.index("-m") + 2 :] if "-m" in self.argv else self.argv[1:]

    def option(self, name: str) -> str | None:
        """The value of `--name VALUE` or `--name=VALUE`."""
        for i, arg in enumerate(self.args):
            if arg == name:
                return self.args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def manifests() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def workloads() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d for d in manifests() if d["kind"] in ("Deployment", "StatefulSet")
    }


def k8s_services() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in manifests() if d["kind"] == "Service"}


def containers() -> Iterator[Container]:
    for name, service in compose()["services"].items():
        argv = [*service.get("entrypoint", []), *service.get("command", [])]
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        yield Container(f"docker-compose.yaml: {name}", argv, env, service)
    for name, workload in workloads().items():
        for c in workload["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            yield Container(
                f"k8s: {name}/{c['name']}", [*c.get("command", []), *c.get("args", [])], env, c
            )


def running(program: str) -> list[Container]:
    found = [c for c in containers() if c.program == program]
    assert found, f"no container runs {program}"
    return found


def option_strings(p: argparse.ArgumentParser) -> set[str]:
    return {o for action in p._actions for o in action.option_strings}


def flags(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


# -- the picture ------------------------------------------------------------------------
def test_the_files_draw_api_replicas_redis_router_and_vllm_replicas() -> None:
    services = compose()["services"]
    assert {"redis", "router", "api"} <= set(services)
    assert len([c for c in running(VLLM_MODULE) if c.where.startswith("docker")]) >= 2
    assert services["api"]["deploy"]["replicas"] >= 2
    k8s = workloads()
    assert {"acs-api", "acs-redis", "acs-router", "acs-vllm"} == set(k8s)
    assert k8s["acs-api"]["spec"]["replicas"] >= 2 and k8s["acs-vllm"]["spec"]["replicas"] >= 2


def test_every_option_of_the_api_exists_and_parses() -> None:
    known = option_strings(reference_parser())
    for c in running("reference_impl"):
        unknown = [f for f in flags(c.args) if f not in known]
        assert not unknown, f"{c.where}: {unknown} are not options of python -m reference_impl"
        args = reference_parser().parse_args(c.args)  # types and values too (exits on an error)
        config = Config()  # and gunicorn takes what they become
        for key, value in gunicorn_options(
            args.host,
            args.port,
            args.workers,
            args.threads,
            args.log_level,
            args.access_log,
            args.worker,
            args.connections,
            args.graceful_timeout,
        ).items():
            config.set(key, value)
        assert config.graceful_timeout == args.graceful_timeout
        options = {
            "--" + v.removeprefix("REFERENCE_").lower().replace("_", "-")
            for v in c.env
            if v.startswith("REFERENCE_")
        }
        assert options <= known, f"{c.where}: {sorted(options - known)} read by no option"


def test_the_api_points_at_the_router_and_budgets_at_redis() -> None:
    services = compose()["services"]
    router_port = next(c for c in running("vllm-router") if c.where.startswith("docker")).option(
        "--port"
    )
    for api in running("reference_impl"):
        upstream = urlsplit(api.option("--upstream") or "")
        budget = api.env["REFERENCE_BUDGET_URL"] or ""
        assert budget.startswith(REDIS_SCHEMES) and api.env.get("REFERENCE_BUDGET_TOKENS"), (
            api.where
        )
        redis_at = urlsplit(budget)
        if api.where.startswith("docker"):
            assert (upstream.hostname, str(upstream.port)) == ("router", router_port)
            assert redis_at.hostname in services and redis_at.port == 6379
        else:
            router = k8s_services()[upstream.hostname]
            assert upstream.port in [p["port"] for p in router["spec"]["ports"]]
            assert redis_at.port in [
                p["port"] for p in k8s_services()[redis_at.hostname]["spec"]["ports"]
            ]


def test_services_select_their_pods_on_the_ports_they_expose() -> None:
    pods = {name: w["spec"]["template"] for name, w in workloads().items()}
    for name, service in k8s_services().items():
        selector = service["spec"]["selector"]
        matched = [p for p in pods.values() if selector.items() <= p["metadata"]["labels"].items()]
        assert len(matched) == 1, name
        ports = {
            p["containerPort"] for c in matched[0]["spec"]["containers"] for p in c.get("ports", [])
        }
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, name


def test_vllm_replicas_run_as_the_reference_runs_vllm() -> None:
    """The flags and environment that reference_impl/launcher.py gives the vLLM it starts."""
    launcher = VllmProcess("MODEL", SERVED, python="python", api=spec())
    wanted = launcher.command()[3:]  # after `python -m reference_impl.vllm_server`
    prompts = launcher.environment()["VLLM_MAX_COMPLETION_PROMPTS"]
    api_lengths = {api.option("--max-model-len") for api in running("reference_impl")}
    for vllm in running(VLLM_MODULE):
        for i, flag in enumerate(wanted):
            if flag.startswith("--") and flag not in PER_DEPLOYMENT:
                value = (
                    wanted[i + 1]
                    if i + 1 < len(wanted) and not wanted[i + 1].startswith("--")
                    else None
                )
                assert (flag in vllm.args) if value is None else vllm.option(flag) == value, (
                    vllm.where,
                    flag,
                )
        assert vllm.option("--served-model-name") == SERVED
        assert vllm.env.get("VLLM_MAX_COMPLETION_PROMPTS") == prompts, vllm.where
        assert api_lengths == {vllm.option("--max-model-len")}, vllm.where
    for router in running("vllm-router"):
        models = router.option("--static-models")
        assert models is None or set(models.split(",")) == {SERVED}


def test_probes_and_graceful_shutdown() -> None:
    for name, workload in workloads().items():
        pod = workload["spec"]["template"]["spec"]
        for c in pod["containers"]:
            ports = {p["containerPort"] for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                assert probe in c, f"{name}: no {probe}"
                target = c[probe].get("httpGet") or c[probe].get("tcpSocket")
                assert target is None or target["port"] in ports, f"{name}: {probe} on another port"
    api = workloads()["acs-api"]["spec"]["template"]["spec"]
    container = api["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"  # the upstream's readiness
    assert "httpGet" not in container["livenessProbe"]  # a router down restarts no API
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    graceful = float(
        next(c for c in running("reference_impl") if c.where.startswith("k8s")).option(
            "--graceful-timeout"
        )
        or 0
    )
    assert graceful > 0 and api["terminationGracePeriodSeconds"] > pre_stop + graceful
    stop = compose()["services"]["api"]["stop_grace_period"]
    compose_graceful = float(
        next(c for c in running("reference_impl") if c.where.startswith("docker")).option(
            "--graceful-timeout"
        )
        or 0
    )
    assert int(re.fullmatch(r"(\d+)s", stop).group(1)) > compose_graceful > 0


@pytest.mark.vllm
def test_vllm_options_exist_in_vllms_parser() -> None:
    python = Path(default_python())
    if not (python.parent.parent / "pyvenv.cfg").exists():
        pytest.skip(f"no vLLM at {python} (run: bash scripts/setup_vllm.sh)")
    dump = (
        "import json; from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser as m; "
        "print(json.dumps(sorted(o for a in m(P())._actions for o in a.option_strings)))"
    )
    done = subprocess.run([str(python), "-c", dump], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    known = set(json.loads(done.stdout.strip().splitlines()[-1]))
    for vllm in running(VLLM_MODULE):
        unknown = [f for f in flags(vllm.args) if f not in known]
        assert not unknown, f"{vllm.where}: {unknown} are not vLLM's options"
