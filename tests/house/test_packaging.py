"""Installable where a deployment's CI runs: the wheel, its commands, the images.

The wheel is built the way docker/*.Dockerfile build it (from the context that
.dockerignore leaves), installed into a fresh venv in a temporary directory, and
run from there with the working directory outside the repository. The images
themselves need a container runtime; their files are checked against the package
instead (what they copy, the extras they install, the commands and settings they run).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from api_server.children import free_port, stop_process, wait_ready
from contract import load_spec, spec
from contract.spec import CHECKOUT_PATH, SPEC_ENV
from contract.version import DISTRIBUTION, describe, package_version, versions
from tests.support.wheel import PIP_TIMEOUT_S, Venv, dockerignore, ignored

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))
# What a CI gate must not pull in: the servers and their web framework.
SERVER_MODULES = {"flask", "werkzeug", "gunicorn", "mock_server", "reference_impl", "api_server"}
# A bound, not an assertion: a hung server fails the test instead of hanging CI.
RUN_TIMEOUT_S = 300


def test_dockerignore_rules_read_as_docker_reads_them() -> None:
    rules = dockerignore()
    for left_out in (
        ".git",
        ".venv",
        ".venv-vllm/bin",
        "models/tiny-llama",
        "acs_completions.egg-info",
        "contract/__pycache__/spec.pyc",
        "__pycache__",
        "bench/node_modules/x",
    ):
        assert ignored(left_out, rules), left_out
    for kept in (
        "pyproject.toml",
        "setup.py",
        "MANIFEST.in",
        "openapi.yaml",
        "contract/spec.py",
        "conformance/golden/caps.yaml",
        "bench/README.md",
        "tests/contract/test_core.py",
    ):
        assert not ignored(kept, rules), kept


# -- the wheel -----------------------------------------------------------------------------


def test_the_wheel_carries_the_top_level_spec_unchanged_and_the_commands(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        assert z.read("contract/openapi.yaml") == (ROOT / "openapi.yaml").read_bytes()
        assert "openapi.yaml" not in z.namelist()  # inside the package, not beside it
        entry_points = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
        lines = z.read(entry_points).decode().split("[console_scripts]\n", 1)[1].splitlines()
    declared = dict(line.split(" = ") for line in lines if " = " in line)
    assert (
        declared
        == SCRIPTS
        == {
            "acs-conformance": "conformance.cli:entry",
            "acs-mock": "mock_server.__main__:main",
            "acs-reference": "reference_impl.__main__:main",
        }
    )


def test_the_wheel_carries_every_file_the_packages_read(wheel: Path) -> None:
    """Every file of the packages but their prose (Markdown) and reference_impl/deploy/ (what
    `python -m reference_impl.front` writes for a deployment; nothing reads it at run time)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z", *PACKAGES], capture_output=True, check=True, cwd=ROOT, text=True
    ).stdout.split("\0")
    data = {
        t
        for t in tracked
        if t and not t.endswith((".py", ".md")) and not t.startswith("reference_impl/deploy/")
    }
    assert "conformance/golden/cheap_requests.json" in data
    with zipfile.ZipFile(wheel) as z:
        assert data - set(z.namelist()) == set()


PACKAGES = tuple(
    p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
)


def run(installed: Venv, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir, env = installed
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=RUN_TIMEOUT_S,
    )


def check_reports(report: dict[str, Any], cwd: Path, stdout: str) -> None:
    """Both versions in every report: the JSON's, the JUnit's properties, the HTML, the terminal."""
    expected = {DISTRIBUTION: package_version(), "openapi.yaml": spec().version}
    assert report["versions"] == expected
    props = ET.parse(cwd / "r.xml").getroot().find("testsuite/properties")
    assert props is not None
    assert {
        p.get("name"): p.get("value") for p in props if p.get("name", "").startswith("version:")
    } == {f"version:{name}": value for name, value in expected.items()}
    assert f"checked with {describe(expected)}." in (cwd / "r.html").read_text()
    assert f"checked with {describe(expected)}\n" in stdout


def run_quick_profile(installed: Venv, url: str, cwd: Path) -> None:
    """The installed acs-conformance --profile quick: exit code 0, both versions in every report."""
    suite = run(
        installed,
        "acs-conformance",
        "--base-url",
        url,
        "--api-key",
        "k",
        "--profile",
        "quick",
        "--no-progress",
        *REPORTS,
        cwd=cwd,
    )
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-4000:]
    report = json.loads((cwd / "r.json").read_text())
    assert report["summary"]["failed"] == 0 and report["summary"]["passed"] > 0
    check_reports(report, cwd, suite.stdout)


REPORTS = ("--json", "r.json", "--junit", "r.xml", "--html", "r.html")
GATE_KEY = "sk-gate-wheel-key"


def ci_job_arguments() -> list[str]:
    """The full-profile run of docs/ci.md's first job, as it writes it."""
    for _, job in ci_jobs():
        for line in job.splitlines():
            line = line.strip().removeprefix("- ")
            if line.startswith("acs-conformance --profile full") and "--baseline" not in line:
                return shlex.split(line)[1:]
    raise AssertionError("docs/ci.md has no full-profile job")


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["outcome"] for r in report["results"]}


def gate_from_the_wheel_equals_the_checkout(gate: Venv, url: str, tmp_path: Path) -> None:
    """docs/ci.md's job from the installed wheel (the URL and key in the environment) and the same
    command from the checkout, with one seed: the same checks, each with the same outcome."""
    bin_dir, env = gate
    args = [*ci_job_arguments(), "--seed", "7"]
    env = {**env, "CONFORMANCE_BASE_URL": url, "CONFORMANCE_API_KEY": GATE_KEY}
    runs = {}
    for name, command in (
        ("wheel", [str(bin_dir / "acs-conformance")]),
        ("checkout", [sys.executable, "-m", "conformance"]),
    ):
        cwd = tmp_path / name
        cwd.mkdir()
        done = subprocess.run(
            [*command, *args],
            capture_output=True,
            text=True,
            cwd=cwd,  # the checkout's: its editable install, wherever it runs
            env=env if name == "wheel" else {**os.environ, **env},
            timeout=RUN_TIMEOUT_S,
        )
        report = json.loads((cwd / "conformance.json").read_text())
        assert done.returncode == 0, (name, done.stdout[-4000:], done.stderr[-4000:])
        runs[name] = report
    assert runs["wheel"]["coverage"] == runs["checkout"]["coverage"]
    assert outcomes(runs["wheel"]) == outcomes(runs["checkout"])
    assert len(outcomes(runs["wheel"])) > 300


def test_the_conformance_extra_is_a_ci_gate_and_the_mock_extra_adds_the_mock(
    gate: Venv, wheel: Path, tmp_path: Path
) -> None:
    """One venv, two steps in this order (a venv a step would cost a minute's pip more): the
    [conformance] extra alone is a CI gate without Flask or a server; the [mock] extra added
    to it, the installed acs-mock passes the installed suite."""
    _gate_without_a_server(gate, tmp_path / "gate")
    bin_dir, env = gate
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", f"{wheel}[mock,conformance]"],
        check=True,
        cwd=tmp_path,
        env=env,
        timeout=PIP_TIMEOUT_S,
    )
    _installed_mock_passes(gate, tmp_path / "mock")


def _gate_without_a_server(gate: Venv, tmp_path: Path) -> None:
    tmp_path.mkdir()
    bin_dir, _ = gate
    version = run(gate, "acs-conformance", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"acs-conformance: {describe(versions(spec()))}\n"
    probe = run(
        gate,
        "python",
        "-c",
        (
            "import importlib.util, json, sys\n"
            "import conformance.cli.main, conformance.checks, conformance.engine.runner, conformance.reports\n"
            "from contract import spec\n"
            "print(json.dumps({'spec': str(spec().path),\n"
            f"  'installed': [m for m in {sorted(SERVER_MODULES)!r} if importlib.util.find_spec(m)],\n"
            f"  'imported': [m for m in sys.modules if m.split('.')[0] in {sorted(SERVER_MODULES)!r}]}}))"
        ),
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert Path(found["spec"]).is_relative_to(
        bin_dir.parent
    )  # the wheel's copy, not the checkout's
    assert found["spec"].endswith("site-packages/contract/openapi.yaml")
    # The wheel carries the servers' packages, but not what they run on (schemathesis brings
    # werkzeug, which the suite does not import); nothing of them is imported.
    assert not {"flask", "gunicorn"} & set(found["installed"])
    assert found["imported"] == []
    # A whole run without Flask installed: against the checkout's mock, from the checkout's
    # interpreter under gunicorn (werkzeug's development server fails robust:'s HTTP checks);
    # with keys, as a deployment has them, and paced as scripts/main.sh's (a steered stream
    # outlives a plain one sent beside it).
    port = free_port()
    log = (tmp_path / "mock.log").open("w")
    mock = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mock_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--keys",
            GATE_KEY,
            "--tpot-ms",
            "5",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(
            f"http://127.0.0.1:{port}",
            mock,
            RUN_TIMEOUT_S,
            name="acs-mock",
            log=tmp_path / "mock.log",
            interval=0.2,
        )
        gate_from_the_wheel_equals_the_checkout(gate, f"http://127.0.0.1:{port}", tmp_path)
    finally:
        stop_process(mock, timeout=30)
        log.close()


def _installed_mock_passes(installed: Venv, tmp_path: Path) -> None:
    tmp_path.mkdir()
    port = free_port()
    log = (tmp_path / "mock.log").open("w")
    bin_dir, env = installed
    mock = subprocess.Popen(
        [str(bin_dir / "acs-mock"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(
            f"http://127.0.0.1:{port}",
            mock,
            RUN_TIMEOUT_S,
            name="acs-mock",
            log=tmp_path / "mock.log",
            interval=0.2,
        )
        run_quick_profile(installed, f"http://127.0.0.1:{port}", tmp_path)
    finally:
        stop_process(mock, timeout=30)
        log.close()


# -- the spec: packaged copy, checkout, override --------------------------------------------


def test_a_checkout_reads_the_top_level_spec_and_acs_openapi_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SPEC_ENV, raising=False)
    assert load_spec().path == CHECKOUT_PATH == ROOT / "openapi.yaml"  # editable install: no copy
    other = tmp_path / "other.yaml"
    other.write_text(
        (ROOT / "openapi.yaml")
        .read_text()
        .replace(f"  version: {spec().version}\n", "  version: 9.9.9-test\n", 1)
    )
    monkeypatch.setenv(SPEC_ENV, str(other))
    assert (load_spec().path, load_spec().version) == (other, "9.9.9-test")


# -- the commands ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_each_command_prints_the_package_and_spec_versions(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module, function = SCRIPTS[command].split(":")
    main = getattr(importlib.import_module(module), function)
    try:
        code = main(["--version"])  # conformance's main returns its code
    except SystemExit as exc:  # the servers' argparse exits
        code = exc.code
    assert code == 0
    out = capsys.readouterr().out
    assert out.endswith(f": {DISTRIBUTION} {package_version()}, openapi.yaml {spec().version}\n"), (
        out
    )


# -- the images, without a container runtime -------------------------------------------------


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_there_is_an_image_for_the_mock_and_one_for_the_suite() -> None:
    assert [d.name for d in DOCKERFILES] == ["conformance.Dockerfile", "mock.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda d: d.name)
def test_each_image_builds_from_what_exists_and_runs_a_command_of_the_package(
    dockerfile: Path,
) -> None:
    steps = instructions(dockerfile)
    for op, args in steps:
        if op == "FROM":  # the base's Python satisfies requires-python
            python = re.fullmatch(r"python:(\d+\.\d+)[\w.-]*(?: AS \w+)?", args, re.IGNORECASE)
            assert python, args
            assert python.group(1) + ".0" in SpecifierSet(PYPROJECT["project"]["requires-python"])
        if op == "COPY" and not args.startswith("--from"):
            *sources, _ = args.split()
            for source in sources:
                assert (ROOT / source).exists() and not ignored(source, dockerignore()), source
    installs = [
        args for op, args in final_stage(dockerfile) if op == "RUN" and "pip install" in args
    ]
    extras = [e for args in installs for e in re.findall(r"\.whl\)\[([\w,-]+)\]", args)]
    assert len(extras) == 1 and extras[0] in EXTRAS, installs
    (entrypoint,) = [json.loads(args) for op, args in final_stage(dockerfile) if op == "ENTRYPOINT"]
    assert entrypoint[0] in SCRIPTS
    module, function = SCRIPTS[entrypoint[0]].split(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert entrypoint[0] == f"acs-{extras[0]}"  # the extra is the command's own


def test_the_mock_image_listens_on_all_interfaces_at_its_exposed_port() -> None:
    from mock_server.__main__ import parser

    steps = final_stage(ROOT / "docker" / "mock.Dockerfile")
    env = dict(pair.split("=", 1) for op, args in steps if op == "ENV" for pair in args.split())
    (exposed,) = [int(args) for op, args in steps if op == "EXPOSE"]
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        args = parser().parse_args([])
    assert (args.host, args.port, args.workers) == ("0.0.0.0", exposed, int(env["MOCK_WORKERS"]))


# -- docs/ci.md ----------------------------------------------------------------------------


def ci_jobs() -> list[tuple[str, str]]:
    """(kind, YAML text) of each job in docs/ci.md; each must parse as YAML."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "ci.md").read_text(), re.DOTALL)
    for block in blocks:
        yaml.safe_load(block)
    return [("github" if "runs-on:" in b else "gitlab", b) for b in blocks]


def test_the_ci_jobs_install_the_conformance_extra_and_run_the_suite_with_a_junit_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from conformance.cli.main import ENV_API_KEY, ENV_BASE_URL, parser

    monkeypatch.delenv(ENV_BASE_URL, raising=False)
    monkeypatch.delenv(ENV_API_KEY, raising=False)
    jobs = ci_jobs()
    assert sorted(kind for kind, _ in jobs) == [
        "github",
        "github",
        "gitlab",
    ]  # the second: the baseline job
    baselines = []
    for kind, job in jobs:
        assert re.findall(r'pip install "acs-completions\[([\w,]+)\] @ ', job) == ["conformance"], (
            kind
        )
        commands = [line.strip().removeprefix("- ").strip() for line in job.splitlines()]
        runs = [shlex.split(c)[1:] for c in commands if c.startswith("acs-conformance ")]
        assert runs and any(run == ["--version"] for run in runs), kind
        (suite,) = [parser().parse_args(run) for run in runs if run != ["--version"]]
        assert suite.junit and job.count(suite.junit) >= 2, kind  # written, then published
        # a deployment with keys refuses an unknown one: checked, not skipped on every deployment
        assert suite.wrong_key_expected, kind
        if suite.baseline:  # committed beside the deployment's code: the job checks it out
            baselines.append(suite.baseline)
            assert "actions/checkout" in job and suite.json, kind
        # The deployment and its key come from secrets through the suite's environment variables,
        # never on the command line.
        assert suite.base_url is None and suite.api_key is None, kind
        assert f"{ENV_BASE_URL}: " in job and f"{ENV_API_KEY}: " in job, kind
    assert baselines == ["conformance-baseline.json"]
