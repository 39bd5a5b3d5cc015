"""The project as a deployment's CI installs it: the wheel built from the Docker build context
(what .dockerignore leaves), as the images' first stage builds it, and a fresh venv outside the
repository with a requirement of it installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from contract.spec import SPEC_ENV

ROOT = Path(__file__).resolve().parents[2]
# A bound, not an assertion: a hung install fails the test instead of hanging CI.
PIP_TIMEOUT_S = 900


def dockerignore() -> list[re.Pattern[str]]:
    """The rules as regexes over context-relative paths (Go's filepath.Match, plus **)."""
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [r for r in rules if r and not r.startswith("#")]
    assert not any(r.startswith("!") for r in rules), "exceptions are not supported here"
    out = []
    for rule in rules:
        rx = "".join(
            ".*"
            if tok == "**"
            else "[^/]*"
            if tok == "*"
            else "[^/]"
            if tok == "?"
            else re.escape(tok)
            for tok in re.split(r"(\*\*|\*|\?)", rule.strip("/"))
        )
        out.append(re.compile(rx.replace(".*/", "(?:.*/)?")))
    return out


def ignored(rel: str, rules: list[re.Pattern[str]]) -> bool:
    parts = rel.split("/")
    return any(r.fullmatch("/".join(parts[:i])) for i in range(1, len(parts) + 1) for r in rules)


def copy_context(dest: Path) -> Path:
    """The repository as a Docker build context: what .dockerignore leaves."""
    rules = dockerignore()

    def skip(directory: str, names: list[str]) -> list[str]:
        rel = Path(directory).relative_to(ROOT).as_posix()
        return [n for n in names if ignored(n if rel == "." else f"{rel}/{n}", rules)]

    shutil.copytree(ROOT, dest, ignore=skip, symlinks=True)
    return dest


def build_wheel(work: Path) -> Path:
    """`pip wheel --no-deps .` in a copy of the build context under `work`, as the images' first
    stage does: the wheel built."""
    src = copy_context(work / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(work / "dist"),
            str(src),
        ],
        check=True,
        cwd=work,
        timeout=PIP_TIMEOUT_S,
    )
    (built,) = (work / "dist").glob("*.whl")
    return built


Venv = tuple[Path, dict[str, str]]  # its bin/ and the environment to run it with


def fresh_venv(home: Path, requirement: str) -> Venv:
    """A new venv in `home` (outside the repository) with `requirement` installed."""
    venv.create(home / "venv", with_pip=True)
    env = {k: v for k, v in os.environ.items() if k not in (SPEC_ENV, "PYTHONPATH", "VIRTUAL_ENV")}
    bin_dir = home / "venv" / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    # pip's cache stays on: PyPI's wheels are fetched once per machine.
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", requirement],
        check=True,
        cwd=home,
        env=env,
        timeout=PIP_TIMEOUT_S,
    )
    return bin_dir, env
