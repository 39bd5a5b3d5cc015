"""The servers bench.http_bench measures, side by side, on free ports of 127.0.0.1:
the mock (`python -m mock_server`), Prism mocking the same openapi.yaml, and the bare
Flask ceiling (bench/servers/bare_app.py) under the mock's own server settings. Candidates of
the serving model (`mock-gthread`, `bare-gthread`) run the same with `--worker gthread`."""

import os
from dataclasses import dataclass
from pathlib import Path

from api_server.serve import add_arguments
from bench import harness
from bench.harness import Server

MODEL = "llama-8b"
PROMPT = "The sky is"
SERVERS = ("mock", "prism", "bare", "mock-gthread", "bare-gthread", "mock-nostats")


class BenchError(Exception):
    """A tooling problem that stops the whole run (exit 2)."""


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    body: dict
    expect_status: int


CASES = (
    Case(
        "a",
        "(a) 400 validation error",
        {"model": MODEL, "prompt": PROMPT, "max_tokens": "16", "temperature": 0},
        400,
    ),
    Case(
        "b",
        "(b) 16-token completion",
        {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "temperature": 0},
        200,
    ),
)

STREAM_BODY = {
    "model": MODEL,
    "prompt": PROMPT,
    "max_tokens": 4096,
    "temperature": 0,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def add_server_arguments(p):
    """The serving options of `python -m mock_server` (api_server/serve.py's, with the
    mock's defaults and MOCK_* variables), for the mock and the ceiling alike."""
    add_arguments(
        p, lambda name, default: os.environ.get("MOCK_" + name, default), os.cpu_count() or 1
    )


def serving_args(args, worker=None):
    """The serving options as given to both the mock and the ceiling."""
    return [
        "--workers",
        str(args.workers),
        "--worker",
        worker or args.worker,
        "--connections",
        str(args.connections_per_worker),
        "--threads",
        str(args.threads),
    ]


def build_servers(args) -> list[Server]:
    servers = []
    for key in args.servers:
        worker = "gthread" if key.endswith("-gthread") else None
        if key == "mock-nostats":  # the mock without vLLM's metrics (--disable-log-stats)
            servers.append(
                harness.mock(
                    *serving_args(args),
                    "--log-level",
                    "warning",
                    "--disable-log-stats",
                    key=key,
                    label="mock --disable-log-stats",
                )
            )
        elif key.startswith("mock"):
            servers.append(
                harness.mock(*serving_args(args, worker), "--log-level", "warning", key=key)
            )
        elif key.startswith("bare"):
            servers.append(
                harness.bare(
                    *serving_args(args, worker), key=key, label=key.replace("bare", "bare Flask", 1)
                )
            )
        else:
            servers.append(harness.prism(key))
    for ref in args.baseline:
        # The mock as of git REF (`--baseline`), for old against new in one run.
        def build(folder: Path, ref: str = ref) -> harness.Server:
            return harness.mock(
                *serving_args(args), "--log-level", "warning", key=f"mock@{ref}", cwd=folder
            )

        servers.append(harness.baseline(ref, build))
    return servers
