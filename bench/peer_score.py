"""Score a server no one here wrote with the conformance suite, and check the gate's promises there.

    .venv/bin/python -m bench peer_score llama-cpp     # writes bench/results/llama_cpp_score.md
    .venv/bin/python -m bench peer_score litellm       # writes bench/results/litellm_score.md

The peers and their set-up are shared/docs/peers.md's, pinned: llama.cpp's OpenAI server
(llama-cpp-python 0.3.36, built once from its sdist into .peers/llama-cpp, about 7 minutes
on 2 cores, serving models/tiny-llama converted to GGUF by the converter the sdist vendors)
and LiteLLM's proxy (1.108.14, installed once into .peers/litellm) in front of the mock. The
full profile runs with the default token ceiling; the score file gives the verdict per
finding class (the classes as the terminal summary groups them, by cause) and the gate's
own promises on that server: tokens within the ceiling, no request past its price but the
peer's own, no tool error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from api_server.children import free_port, wait_ready
from bench.harness import MODEL_DIR, ROOT, command_line
from bench.report import write_report
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome, RunReport, exit_code
from conformance.reports.console import by_cause
from contract import spec

PEERS = ROOT / ".peers"
KEY = "peer-score-key"
LLAMA_CPP = "llama-cpp-python==0.3.36"
LITELLM = "1.108.14"


def _run(*argv: str | Path, **kw: object) -> None:
    subprocess.run([str(a) for a in argv], check=True, **kw)  # type: ignore[call-overload]


# -- llama.cpp ---------------------------------------------------------------------------------


def llama_cpp_ready(home: Path) -> tuple[Path, Path]:
    """(its Python, the GGUF model), built once under `home` (shared/docs/peers.md)."""
    python, gguf = home / "venv" / "bin" / "python", home / "tiny.gguf"
    if not python.exists() or subprocess.run([python, "-c", "import llama_cpp.server"]).returncode:
        _run(sys.executable, "-m", "venv", home / "venv")
        _run(
            python,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            LLAMA_CPP,
            "-d",
            home / "sdist",
        )
        sdist = next((home / "sdist").glob("llama_cpp_python-*.tar.gz"))
        _run(
            python,
            "-m",
            "pip",
            "install",
            "-q",
            f"{sdist}[server]",
            env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"},
        )
    if not gguf.exists():
        sdist = next((home / "sdist").glob("llama_cpp_python-*.tar.gz"))
        _run("tar", "xzf", sdist, "-C", home)
        vendor = next(home.glob("llama_cpp_python-*/vendor/llama.cpp"))
        _run(
            ROOT / ".venv-vllm" / "bin" / "python",
            vendor / "convert_hf_to_gguf.py",
            MODEL_DIR,
            "--outfile",
            gguf,
            "--outtype",
            "f32",
            env={
                **os.environ,
                "PYTHONPATH": str(vendor / "gguf-py"),
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )
    return python, gguf


@contextmanager
def llama_cpp(home: Path) -> Iterator[str]:
    python, gguf = llama_cpp_ready(home)
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [
                python,
                "-m",
                "llama_cpp.server",
                "--model",
                gguf,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--model_alias",
                spec().default_model,
                "--n_ctx",
                "2048",
                "--api_key",
                KEY,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(
                url, proc, 120, name="llama.cpp's server", any_status=True
            )  # it has no /health: 404
            yield url
        finally:
            proc.terminate()
            proc.wait(30)


# -- LiteLLM in front of the mock --------------------------------------------------------------

# `litellm[proxy]` cannot be resolved from the registry (shared/docs/peers.md): these two of its
# pins are absent, so the ones that are there go in without their dependencies.
LITELLM_PINS_ABSENT = {"litellm-proxy-extras": "0.4.110", "litellm-enterprise": "0.1.79.post1"}


def litellm_ready(home: Path) -> Path:
    """The proxy's `litellm` command, installed once under `home` as peers.md says."""
    python, command = home / "venv" / "bin" / "python", home / "venv" / "bin" / "litellm"
    if (
        command.exists()
        and not subprocess.run([python, "-c", "import litellm.proxy.proxy_server"]).returncode
    ):
        return command
    _run(sys.executable, "-m", "venv", home / "venv")
    _run(python, "-m", "pip", "install", "-q", f"litellm=={LITELLM}")
    found = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('litellm')))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    proxy = [
        r.split(";")[0].strip() for r in found if "extra == 'proxy'" in r or 'extra == "proxy"' in r
    ]
    wanted = [r for r in proxy if not any(r.startswith(name) for name in LITELLM_PINS_ABSENT)]
    _run(python, "-m", "pip", "install", "-q", *wanted)
    _run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        *(f"{k}=={v}" for k, v in LITELLM_PINS_ABSENT.items()),
    )
    _run(
        python, "-m", "pip", "install", "-q", "prisma"
    )  # without it, its own error handler crashes
    return command


@contextmanager
def litellm(home: Path) -> Iterator[str]:
    command = litellm_ready(home)
    from mock_server.testing import live_mock

    with live_mock() as mock, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            f"  - model_name: {spec().default_model}\n"
            f"    litellm_params: {{model: text-completion-openai/{spec().default_model}, "
            f'api_base: "{mock.url}/v1", api_key: mock-key}}\n'
            f"general_settings: {{master_key: {KEY}}}\n",
            encoding="utf-8",
        )
        port = free_port()
        with open(Path(tmp) / "log", "wb") as log:
            proc = subprocess.Popen(
                [command, "--config", config, "--host", "127.0.0.1", "--port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            )
            url = f"http://127.0.0.1:{port}"
            try:
                wait_ready(
                    url, proc, 180, name="LiteLLM's proxy", any_status=True
                )  # its /health is keyed
                yield url
            finally:
                proc.terminate()
                proc.wait(30)


PEER = {
    "llama-cpp": (
        llama_cpp,
        "llama_cpp_score.md",
        f"llama.cpp's OpenAI server ({LLAMA_CPP}, models/tiny-llama "
        "as GGUF f32, `--n_ctx 2048 --api_key KEY`)",
    ),
    "litellm": (
        litellm,
        "litellm_score.md",
        f"LiteLLM's proxy ({LITELLM}) in front of the mock "
        "(`text-completion-openai/llama-8b`, a master key)",
    ),
}


# -- the score ---------------------------------------------------------------------------------


def promises(report: RunReport) -> str:
    """The gate's own promises on this server, each measured."""
    over = ", ".join(f"`{o['check']}` ({o['spent']})" for o in report.overspent) or "none"
    return "\n".join(
        [
            f"- token ceiling: {report.tokens} generated of {report.token_ceiling} "
            f"({'kept' if report.tokens <= report.token_ceiling else 'BROKEN'})",
            f"- requests past their price (the server reporting more tokens than max_tokens x n allows): {over}",
            f"- tool errors: {report.count(Outcome.ERROR)}",
            f"- numbers the server did not give, the spec's taken: {report.assumed or 'none'}",
        ]
    )


# Our reading of each class of finding a peer has shown, by how its line starts: what the
# server does that makes it true (a class not listed reads "unread": a person reads it).
VERDICTS = {
    "status 200, expected 400": "true: it accepts what the contract refuses (unknown fields and caps unread, "
    "chat served, strings for numbers)",
    "X-Request-Id is not in the spec's format": "true: its X-Request-Id has no `req_` prefix",
    "no X-Request-Id header": "true: it sends none",
    "status 500, expected 200": "true: a request the contract accepts gets a 500 (token-id prompts, `top_k: -1`)",
    "status 500, expected 400": "true: a 500 where the contract refuses with a 400 (pydantic's errors unwrapped)",
    "status 400, expected 200": "true: it refuses what the contract accepts",
    "the body differs": "true: its own error shapes and words",
    "(finish_reason, stop_reason)": "true: allowed_token_ids unread, so the choice does not end on an end token",
    "status 404, expected 200": "true: no /health",
    "status 401, expected 200": "true: its /health needs a key",
    "the server generated": "true: its usage reports more tokens than max_tokens x n allows",
    "the usage differs": "true: the counts are wrong",
    "the choice indexes": "true: n unread, or choices merged",
    "status 200, expected 404": "true: any model name is served",
    "status 200, expected 413": "true: no body cap",
    "status 500, expected 41": "true: a 500 where the contract answers 413 or 415",
    ": a server error": "true: a 5xx for a hostile input",
    ": the error body is not the API's shape": "true: its server's own words (uvicorn's, h11's), not the API's",
    "echo false: text_offset differs": "true: without echo its offsets start at the prompt's length",
    ": the first token (BOS": "true: echo leaves the BOS token out",
    ": Schema-violating request accepted": "true: it accepts what the schema refuses",
    ": Server error": "true: a 5xx for a body the schema refuses",
    ": Undocumented": "true: a status or media type the spec does not list",
    ": Response": "true: its answers are not the spec's shapes",
    ": Wrong response to undeclared method": "true: 404 where the spec says 405",
    "status 400, expected 401": "true: a key without `Bearer` answered 400 (LiteLLM: 'No connected db.')",
    "status 400, expected 404": "true: an unknown model answered 400",
    "status 200, expected 415": "true: the media type unread",
    "events out of order": "true: a choice in the usage chunk (LiteLLM)",
    "the id is not the completion prefix": "true: the completion id rewritten",
    "event 0 (content) does not match its schema": "true: stream choices without their logprobs and finish_reason keys",
    "chunk 0: no logprobs": "true: logprobs dropped from stream chunks",
    "the streamed texts differs": "true: the two choices of n: 2 merged into index 0 in streams",
    "streamed: ": "true: streams are not the answers without stream (LiteLLM: the choices of n: 2 "
    "merged into index 0, their tokens in one choice and none in the other)",
    ": no answer within": "true: it hangs on a hostile request (uvicorn's h11 waits for the "
    "2**64 - 1 bytes of a chunk it was told of)",
    "not exactly one usage chunk": "true: usage on every chunk",
    ": not refused": "true: accepted",
    # llama.cpp (llama-cpp-python 0.3.36): a default repeat_penalty of 1.1 (the API's
    # repetition_penalty defaults to 1) and a sampler chain that cuts top_k and top_p before it
    # applies the temperature (vLLM applies it first)
    "with top_k 2 a sampled token is not among": "true: its default repetition penalty (1.1, the "
    "API's is 1) reranks the tokens it samples from",
    "at temperature 0.25 with top_k 5": "true: its default repetition penalty reranks the tokens, "
    "and its temperature comes after the cut",
    "tokens sampled with a top_p are past it": "true: its top_p cuts before the temperature "
    "(llama.cpp's sampler order), after its default repetition penalty",
    "choice 0: the streamed text differs": "true: echo left out of the stream",
    "drawn probes with ignore_eos are not max_tokens long": "true: one token past max_tokens in "
    "its rows (its usage's + 1)",
    "drawn stop strings did not stop their answer": "true: a stop string that holds a character of "
    "several bytes is not matched",
}


def verdict(message: str) -> str:
    """Our reading of a class, by how its line starts (or, for `:`-led keys, what it holds)."""
    return next(
        (
            v
            for key, v in VERDICTS.items()
            if (key in message if key.startswith((":", "echo")) else message.startswith(key))
        ),
        "unread",
    )


def classes(report: RunReport) -> str:
    rows = []
    for message, results in by_cause(report.failed):
        names = ", ".join(f"`{r.id}`" for r in results[:3]) + (", …" if len(results) > 3 else "")
        text = " ".join(message.split()).replace("|", "\\|")
        rows.append(f"| {len(results)} | {text[:220]} | {verdict(message)} | {names} |")
    return (
        "| checks | first finding (one cause) | verdict | checks |\n| ---: | --- | --- | --- |\n"
        + "\n".join(rows)
    )


def markdown(name: str, what: str, report: RunReport, duration: float) -> str:
    skipped = "\n".join(
        f"- `{r.id}`: {' '.join(r.reason.split())[:200]}"
        for r in report.results
        if r.outcome is Outcome.SKIPPED
    )
    passed = ", ".join(f"`{r.id}`" for r in report.results if r.outcome is Outcome.PASSED)
    return f"""# {what} scored by the conformance suite

`{command_line("peer_score", [name])}`, the full profile with the default token ceiling, in {duration:.0f} s:
**{report.count(Outcome.PASSED)} of {len(report.results)} checks pass, {report.count(Outcome.FAILED)} fail,
{report.count(Outcome.WARNED)} warn, {report.count(Outcome.SKIPPED)} skipped, {report.count(Outcome.ERROR)} tool errors**
(exit code {int(exit_code(report))}).

The gate's promises on this server:

{promises(report)}

The findings by cause (the terminal summary's grouping). Each class is the server's own
doing unless the note below says otherwise; tests/conformance/test_peers.py reproduces each way this
peer once fooled the gate with a server of ours that behaves as it did.

{classes(report)}

Skipped, each saying why (a premise the server does not meet names the check of that field):

{skipped}

Passed: {passed}.
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("peer", choices=sorted(PEER))
    p.add_argument("--home", type=Path, help="where the peer is installed (default .peers/PEER)")
    args = p.parse_args(argv)
    start_peer, out, what = PEER[args.peer]
    home = (args.home or PEERS / args.peer).resolve()
    home.mkdir(parents=True, exist_ok=True)
    with start_peer(home) as url:
        config = RunConfig(url, KEY, profile="full")
        start = time.perf_counter()
        report = run_suite(config)
        duration = time.perf_counter() - start
    path = ROOT / "bench" / "results" / out
    write_report(path, markdown(args.peer, what, report, duration))
    print(
        f"{report.count(Outcome.PASSED)}/{len(report.results)} passed, {report.tokens} tokens "
        f"(ceiling {report.token_ceiling}); wrote {path}"
    )
    return 0


def run_suite(config: RunConfig) -> RunReport:
    from conformance.engine.runner import run

    return run(config, select(REGISTRY, config))


if __name__ == "__main__":
    sys.exit(main())
