"""Score plain vLLM (no API layer in front) with the conformance suite: the second foil beside Prism.

    .venv/bin/python -m bench vllm_score      # writes bench/results/vllm_score.md and the README's table

vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`, from
.venv-vllm, with its defaults and `--api-key`) serves models/tiny-llama as
llama-8b, as a team would deploy it on day one; the suite's full profile runs
against it with the default token ceiling. It shows what a bare vLLM deployment
misses: the contract's error bodies, request ids, caps, strict types and the
chat refusal are not vLLM's.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable

from bench.harness import MODEL_DIR, ROOT, command_line
from bench.readme_block import replace_block
from bench.report import write_report
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import CheckResult, Outcome, RunReport, exit_code
from conformance.engine.runner import run
from contract import spec
from reference_impl.launcher import VllmProcess, default_python

OUT = ROOT / "bench" / "results" / "vllm_score.md"
README = ROOT / "README.md"
KEY = "vllm-score-key"
COMMAND = command_line("vllm_score", [])
# The README's copy of the table lies between these two lines (rewritten by this script).
BEGIN, END = f"<!-- vllm-score: {COMMAND} -->", "<!-- /vllm-score -->"


def vllm_version() -> str:
    import subprocess

    done = subprocess.run(
        [default_python(), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "?"


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def table(report: RunReport) -> str:
    """The score by group, then what a bare vLLM misses (the first finding of each failed check)."""
    groups: dict[str, Counter[str]] = {}
    for r in report.results:
        groups.setdefault(r.group, Counter())[r.outcome.value] += 1
    rows = "\n".join(
        f"| {g} | {c['passed']} | {c['failed']} | {c['warned']} | {c['skipped']} |"
        for g, c in groups.items()
    )
    first = Counter(
        one_line(r.findings[0].message.split(":")[0])[:70] for r in report.failed if r.findings
    )
    reasons = "\n".join(f"| {n} | {msg} |" for msg, n in first.most_common(10))
    return f"""**{report.count(Outcome.PASSED)} of {len(report.results)} checks pass, {report.count(Outcome.FAILED)} fail,
{report.count(Outcome.WARNED)} warn, {report.count(Outcome.SKIPPED)} skipped, {report.count(Outcome.ERROR)} tool errors** (exit code
{int(exit_code(report))}); the server generated {report.tokens} tokens (ceiling {report.token_ceiling};
the plan for a server that does not conform: {report.token_plan}).

| group | passed | failed | warned | skipped |
| --- | ---: | ---: | ---: | ---: |
{rows}

What a bare vLLM deployment misses, by the first finding of each failed check:

| failed checks | first finding |
| ---: | --- |
{reasons}"""


def ledger(report: RunReport) -> str:
    """What the token ledger held back, as a paragraph ('' if nothing)."""
    note = report.ceiling_note()
    return f"Held back by the token ledger: {one_line(note)}.\n\n" if note else ""


def listed(results: Iterable[CheckResult]) -> str:
    """Each check with findings, and its first finding, as a list."""
    return "\n".join(
        f"- `{r.id}`: {cut(one_line(r.findings[0].message), 140)}" for r in results if r.findings
    )


def cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"


def markdown(report: RunReport, version: str, duration: float) -> str:
    non_golden = listed(r for r in report.failed if r.group != "golden")
    warned = listed(report.warned) or "- none"
    passed = ", ".join(f"`{r.id}`" for r in report.results if r.outcome is Outcome.PASSED)
    skipped = "\n".join(
        f"- `{r.id}`: {r.reason.splitlines()[0][:160]}"
        for r in report.results
        if r.outcome is Outcome.SKIPPED
    )
    return f"""# Plain vLLM scored by the conformance suite

vLLM {version} (`python -m vllm.entrypoints.openai.api_server --model models/tiny-llama
--served-model-name llama-8b --api-key KEY`, its defaults, no API layer in front; max_model_len
{report.server_max_model_len}) against the full profile, in {duration:.0f} s:
{table(report)}

{ledger(report)}Regenerate with `{COMMAND}` (it starts vLLM from .venv-vllm, about a
minute on a CPU). `tests/reference/test_vllm_conformance.py` runs the same in CI.

Failed checks outside the golden cases:

{non_golden}

Warned (only a front's own words, conformance/README.md "A front's own words: warnings": they do
not change the exit code; `--strict` makes them failures):

{warned}

Skipped:

{skipped}

What plain vLLM passes: {passed}.

In short: vLLM answers in its own shapes (`{{"detail": "Not Found"}}` for an unknown
route, `{{"error": "Unauthorized"}}` without a key, its own messages and codes
elsewhere, 400 where the contract says 415), writes no `request_id` or
`X-Request-Id`, and accepts much that the contract refuses: chat, fields the API
leaves out (`best_of`, `use_beam_search`), strings and booleans for numbers, the
cross-field rules, the generated-token cap, bodies over 8 MiB. `GET /v1/models`
has no `num_layers` or `hidden_size`, and no activations come back. Its streams
are well framed (the `stream:` checks pass). Where a request no HTTP client sends
gets uvicorn's own words (not JSON), that is a warning, not a failure. Every probe
that a conforming server would refuse asks for one token of one sequence (or is a
stream the suite closes after its first event), so the whole profile runs within
the ceiling.
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    served = spec().default_model
    with (
        tempfile.TemporaryFile() as log,
        VllmProcess(
            str(MODEL_DIR),
            served,
            plain=True,
            extra_args=["--api-key", KEY],
            log_file=log,
            api=spec(),
        ) as vllm,
    ):
        config = RunConfig(vllm.url, KEY, model=served, profile="full", timeout=args.timeout)
        start = time.perf_counter()
        report = run(config, select(REGISTRY, config))
        duration = time.perf_counter() - start
    write_report(OUT, markdown(report, vllm_version(), duration))
    replace_block(README, BEGIN, END, table(report))
    print(
        f"{report.count(Outcome.PASSED)}/{len(report.results)} passed, {report.tokens} tokens; wrote {OUT}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
