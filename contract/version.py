"""Which code and which contract: the package's version and openapi.yaml's info.version.

Every command's `--version` prints both, and every conformance report records both,
so that a CI log says which contract it checked.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from contract.spec import Spec, SpecError, spec

DISTRIBUTION = "acs-completions"


def package_version() -> str:
    """The installed distribution's version; a bare checkout (not installed) has none."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def versions(api: Spec) -> dict[str, str]:
    """Both versions, as the reports record them (`api`: the spec checked)."""
    return {DISTRIBUTION: package_version(), "openapi.yaml": api.version}


def describe(named: Mapping[str, str]) -> str:
    """'acs-completions 0.1.0, openapi.yaml 1.0.0': one line for logs and reports."""
    return ", ".join(f"{name} {version}" for name, version in named.items()) or "unknown versions"


def version_line() -> str:
    """--version's line: the package's and the command's spec's (an entry point's)."""
    return describe(versions(spec()))


class VersionAction(argparse.Action):
    """`--version`: like argparse's own, but the spec is read only when it is asked for."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=default,
            help=help or "print the package's and openapi.yaml's versions and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        try:
            line = version_line()
        except SpecError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
        print(f"{parser.prog}: {line}")  # stdout, as argparse's own version action
        parser.exit(0)
