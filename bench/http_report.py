"""The markdown report of bench.http_bench: tables of every cell, the machine,
the versions and the exact command."""

import contextlib
import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

from bench.harness import API_KEY, PRISM_BIN, ROOT
from bench.http_servers import CASES, STREAM_BODY, serving_args

# mock/Prism requests/s goals by connection count (issue 9); mock/bare at least BARE_GOAL.
PRISM_GOALS = {1: 1.2, 64: 1.5}
BARE_GOAL = 0.6


def command_output(argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"
    return (
        (done.stdout or done.stderr).strip().splitlines()[0]
        if (done.stdout or done.stderr)
        else "n/a"
    )


def package_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "n/a"


def collect_versions():
    rev = command_output(["git", "rev-parse", "--short", "HEAD"])
    dirty = command_output(["git", "status", "--porcelain", "--", "mock_server", "contract"])
    return {
        "mock": f"git {rev}" + (" + uncommitted changes" if dirty != "n/a" else ""),
        "Prism": f"@stoplight/prism-cli {command_output([str(PRISM_BIN), '--version'])}",
        "node": command_output(["node", "--version"]),
        "wrk": command_output(["wrk", "--version"]).split(" Copyright")[0],
        "Python": platform.python_version(),
        "Flask": package_version("flask"),
        "gunicorn": package_version("gunicorn"),
        "gevent": package_version("gevent"),
    }


def machine_info():
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kib / 2**20:.0f} GiB"
    return f"{cpu}, {os.cpu_count()} cores, {mem} RAM, {platform.system()} {platform.release()}"


def fmt_cell(cell):
    if "na" in cell:
        return "n/a", "n/a"
    flag = "" if not (cell["wrong_status"] or cell["socket_errors"]) else " (!)"
    return f"{cell['rps']:,.0f}{flag}", f"{cell['p50_ms']:.2f} / {cell['p99_ms']:.2f}"


def ratio(cells, case, conns, other):
    a, b = cells.get((case, conns, "mock")), cells.get((case, conns, other))
    if not a or not b or "na" in a or "na" in b:
        return None
    return a["rps"] / b["rps"]


def fmt_ratio(value, goal):
    if value is None:
        return "n/a"
    return f"{value:.2f} ({'meets' if value >= goal else 'misses'} >= {goal:g})"


NOT_MEASURED = "Not measured in this run (`--rounds 0`)."


def throughput_table(servers, cells, args):
    if not cells:
        return [NOT_MEASURED]
    keys = [s.key for s in servers]
    labels = {s.key: s.label for s in servers}
    head = ["case", "conns"]
    for k in keys:
        head += [f"{labels[k]} req/s", f"{labels[k]} p50 / p99 ms"]
    head += ["mock/Prism", "mock/bare"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for case in CASES:
        for conns in args.connections:
            row = [case.title, str(conns)]
            for k in keys:
                row += fmt_cell(cells[case.key, conns, k])
            row += [
                fmt_ratio(ratio(cells, case.key, conns, "prism"), PRISM_GOALS.get(conns, 1.0)),
                fmt_ratio(ratio(cells, case.key, conns, "bare"), BARE_GOAL),
            ]
            rows.append("| " + " | ".join(row) + " |")
    return rows


def cpu_table(servers, cells, args):
    """The servers' CPU time per request over all rounds: less swayed by other load on
    the machine than requests/s. A ratio here is other/mock, so >= 1 favours the mock."""
    if not cells:
        return [NOT_MEASURED]
    labels = {s.key: s.label for s in servers}
    head = [
        "case",
        "conns",
        *(f"{labels[s.key]} CPU us/req" for s in servers),
        "Prism/mock",
        "bare/mock",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for case in CASES:
        for conns in args.connections:
            cell = {s.key: cells[case.key, conns, s.key] for s in servers}
            row = [case.title, str(conns)]
            row += [
                "n/a" if "na" in cell[s.key] else f"{cell[s.key]['cpu_us']:,.0f}" for s in servers
            ]
            for other in ("prism", "bare"):
                mine, theirs = cell.get("mock"), cell.get(other)
                ok = mine and theirs and "na" not in mine and "na" not in theirs and mine["cpu_us"]
                row.append(f"{theirs['cpu_us'] / mine['cpu_us']:.2f}" if ok else "n/a")
            rows.append("| " + " | ".join(row) + " |")
    return rows


def stream_table(servers, streams):
    rows = [
        "| server | tokens/s | tokens | TTFT ms | runs (median shown) | server CPU us/token |"
        " note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in servers:
        st = streams[s.key]
        if "na" in st:
            rows.append(f"| {s.label} | n/a | | | | | {st['na']} |")
            continue
        note = "tokens from the usage chunk" if st["usage"] else "tokens counted as content chunks"
        if s.key == "bare":
            note = (
                "fixed one-token chunks, one write each: the server's share of a stream's cost;"
                " its tokens/s is about what this Python client can read"
            )
        rows.append(
            f"| {s.label} | {st['tokens_per_s']:,.0f} | {st['tokens']} | "
            f"{st['ttft_ms']:.1f} | {st['runs']} | {st['cpu_us_per_token']:.1f} | {note} |"
        )
    return rows


def problems(servers, cells):
    lines = [f"- {s.label} did not run: {s.failure}" for s in servers if s.failure]
    for (case, conns, key), cell in cells.items():
        label = next(s.label for s in servers if s.key == key)
        if "na" in cell and not next(s for s in servers if s.key == key).failure:
            lines.append(f"- ({case}) c={conns} {label}: {cell['na']}")
        elif "na" not in cell and (cell["wrong_status"] or cell["socket_errors"]):
            lines.append(
                f"- (!) ({case}) c={conns} {label}: {cell['wrong_status']} answers with "
                f"the wrong status class, {cell['socket_errors']} socket errors/timeouts "
                f"of {cell['requests']} requests (all rounds)"
            )
    return lines


def rounds_table(servers, cells, args):
    if not cells:
        return [NOT_MEASURED]
    rows = ["| case | conns | server | req/s in each round |", "| --- | --- | --- | --- |"]
    for case in CASES:
        for conns in args.connections:
            for s in servers:
                cell = cells[case.key, conns, s.key]
                if "na" not in cell:
                    values = ", ".join(f"{v:,.0f}" for v in cell["rounds"])
                    rows.append(f"| {case.title} | {conns} | {s.label} | {values} |")
    return rows


def report(servers, cells, streams, extra, versions, args, command):
    (before, after) = versions.pop("load")
    load = f"load average {before[0]:.2f} before the run, {after[0]:.2f} after"
    warning = busy_warning(before[0])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# HTTP serving: mock vs Prism vs bare Flask",
        "",
        f"- Date: {now}",
        f"- Command: `{command}`",
        f"- Machine: {machine_info()}; wrk and the servers share these cores; {load}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- Server settings: mock and bare Flask under api_server/serve.py with the same options"
        f" `{' '.join(serving_args(args))}` (gunicorn; `-gthread` columns: `--worker gthread`);"
        " Prism `prism mock openapi.yaml -v silent` (openapi.yaml unchanged, one Node process)",
        f"- Load: wrk `-t1 -c<conns> -d{args.duration}s --latency --timeout 10s` with"
        f" bench/wrk_post.lua; {args.rounds} rounds of every cell, the servers interleaved,"
        f" the median round shown; first a {args.warmup} s warm-up per server and case at"
        f" {max(args.connections)} connections;"
        f" key `Authorization: Bearer {API_KEY}`",
        "",
        *([warning, ""] if warning else []),
        "## Requests/s and latency",
        "",
        "Goals (issue 9): mock/Prism >= 1.2 at one connection, >= 1.5 at 64; mock >= 60% of the"
        " bare ceiling under the same server (ratio >= 0.6).",
        "",
        *throughput_table(servers, cells, args),
        "",
        "Server CPU time per request, summed over every round (all the server's processes,"
        " from /proc; wrk's own CPU not counted). It is less swayed than requests/s by other"
        " load on the machine; a ratio is other/mock, so a ratio >= 1 means the mock spends"
        " no more CPU per request than the other server.",
        "",
        *cpu_table(servers, cells, args),
        "",
        "## One unthrottled stream (c)",
        "",
        f"`max_tokens` {STREAM_BODY['max_tokens']}, temperature 0, ignore_eos, include_usage;"
        f" one connection, streams back to back for {args.duration} s; tokens/s over the whole"
        " request (from sending it to `[DONE]`); the server's CPU time per token over every"
        " run (the client's own parsing, on the same cores, not counted).",
        "",
        *stream_table(servers, streams),
        "",
        *concurrency_section(servers, extra, args),
        *stalled_section(servers, extra, args),
        "## Every round",
        "",
        *rounds_table(servers, cells, args),
    ]
    trouble = problems(servers, cells)
    if trouble:
        out += ["", "## Problems", "", *trouble]
    return "\n".join(out) + "\n"


def busy_warning(load_before):
    """A line for a machine that was not quiet when the run began, or None."""
    cores = os.cpu_count() or 1
    if load_before < 0.5 * cores:
        return None
    return (
        f"**The machine was busy** (load average {load_before:.2f} on {cores} cores when the"
        " run began): other processes took CPU from the servers and wrk, so requests/s vary"
        " from round to round; the CPU time per request is the steadier comparison."
    )


def concurrency_section(servers, extra, args):
    cells = {s.key: extra.get(("d", s.key)) for s in servers if s.key != "prism"}
    if not any(cells.values()):
        return []
    rows = [
        "## Many open streams at once (d)",
        "",
        f"{args.streams} streams opened together, each {args.stream_tokens} tokens at"
        f" {args.tpot_ms} ms per token (`X-Mock-Tpot-Ms`), ideal wall time"
        f" {args.stream_tokens * args.tpot_ms / 1000:g} s; one asyncio client (uvloop) on raw sockets."
        " Goals: every stream ends with `[DONE]`, wall time <= 1.5x the ideal, TTFT p99 < 0.5 s."
        " Memory: the growth of the server's resident memory (all its processes) at the peak,"
        " per open stream. Client CPU: the load client's own CPU time (one process, on the same cores).",
        "",
        "| server | done | wall s (x ideal) | TTFT p50 / p99 s | server CPU s | client CPU s | KiB per open stream | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in servers:
        c = cells.get(s.key)
        if not c:
            continue
        if "na" in c:
            rows.append(f"| {s.label} | n/a | | | | | | {c['na']} |")
            continue
        ttft = (
            "n/a" if c["ttft_p50_s"] is None else f"{c['ttft_p50_s']:.2f} / {c['ttft_p99_s']:.2f}"
        )
        rows.append(
            f"| {s.label} | {c['done']} of {c['streams']} | {c['wall_s']:.1f} ({c['wall_s'] / c['ideal_s']:.1f}x)"
            f" | {ttft} | {c['cpu_s']:.1f} | {c['client_cpu_s']:.1f} | {c['kib_per_stream']:.1f} | {'; '.join(c['errors'])} |"
        )
    return rows + [""]


def stalled_section(servers, extra, args):
    cells = {s.key: extra.get(("e", s.key)) for s in servers}
    if not any(cells.values()):
        return []
    rows = [
        "## Stalled clients (e)",
        "",
        f"{args.stalled} clients each send the headers and half the body of a 16-token request,"
        " then nothing. Meanwhile 200 whole requests, one after another, on new connections:"
        " their latency without and with the stalled clients. Then how each stalled client is"
        " answered (the body-read timeout, x-caps `body_read_seconds`) and after how long.",
        "",
        "| server | p50 ms quiet -> stalled | p99 ms quiet -> stalled | stalled answered 400 | other answers | answered after s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in servers:
        c = cells.get(s.key)
        if not c:
            continue
        if "na" in c:
            rows.append(f"| {s.label} | n/a | | | | {c['na']} |")
            continue
        rows.append(
            f"| {s.label} | {c['p50_quiet_ms']:.2f} -> {c['p50_stalled_ms']:.2f} |"
            f" {c['p99_quiet_ms']:.2f} -> {c['p99_stalled_ms']:.2f} | {c['answered_400']} of {c['stalled']}"
            f" | {', '.join(c['other']) or 'none'} | {c['answer_min_s']:.1f} - {c['answer_max_s']:.1f} |"
        )
    return rows + [""]
