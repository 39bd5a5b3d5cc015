"""metrics:* — with --metrics-url, a deployment's Prometheus metrics against vLLM's own.

A router (the Gateway API Inference Extension), an autoscaler and a dashboard read vLLM's
metrics by name: a renamed one breaks them silently. The contract is a real vLLM's scrape
(conformance/vllm_metrics.json, recorded by conformance.spec.metrics), so these checks
say what vLLM says, not what someone wrote down:

- metrics:vllm_families: every `vllm:` family the deployment exports is one of vLLM's, with
  its type, labels and buckets; the families x-metrics requires (vLLM's dashboard's, the
  gateways') are there;
- metrics:counters_move: the counters move with the requests this check sends (requests
  finished, prompt and generation tokens), by at least what their usage says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.spec.metrics import counter_totals, families, load
from conformance.wire.client import IDENTITY, BoundedTransport, answer_bounds
from conformance.wire.secrets import SECRETS

TAGS = ("metrics",)
T = TypeVar("T")
SENT = 2  # requests counters_move sends
MAX_TOKENS = 1


def scrape(ctx: Context, read: Callable[[str], T]) -> T:
    """The deployment's /metrics, read by `read`; one that is not Prometheus' text format is a
    finding (the server's), never the suite's error."""
    if not ctx.config.metrics_url:
        ctx.skip("no --metrics-url: the deployment's /metrics is not checked")
    # bounded as the API's answers are (its own client: the API key is not sent to it)
    bounded = BoundedTransport(
        httpx.HTTPTransport(), *answer_bounds(ctx.api.caps, ctx.config.timeout)
    )
    try:
        with httpx.Client(
            transport=bounded, timeout=ctx.config.timeout, headers={"Accept-Encoding": IDENTITY}
        ) as http:
            ctx.client.wait_turn()  # --rate-limit paces every request the gate sends
            resp = http.get(ctx.config.metrics_url)
    except httpx.HTTPError as exc:
        ctx.stop(f"GET {ctx.config.metrics_url}: no HTTP response: {type(exc).__name__}: {exc}")
    if resp.status_code != 200:
        ctx.stop(
            f"GET {ctx.config.metrics_url} answered {resp.status_code}",
            expected=200,
            received=SECRETS.cut(resp.text, 300),
        )
    try:
        return read(resp.text)
    except ValueError as exc:
        ctx.stop(
            f"GET {ctx.config.metrics_url}: not Prometheus' text format: {exc}",
            received=SECRETS.cut(resp.text, 300),
        )
        raise  # unreachable: stop raises


@register("metrics:vllm_families", tags=TAGS)
def vllm_families(ctx: Context) -> None:
    """Each `vllm:` family exported is vLLM's, with its type, labels and buckets (a token-count
    family's from the model's max_model_len, as vLLM builds them); every family x-metrics
    requires (what vLLM's own dashboard and the gateways read) is exported."""
    theirs = scrape(ctx, families)
    contract = load()
    known, vllm = contract["families"], contract["recorded_from"]
    rules = ctx.api.metrics
    for name, got in sorted(theirs.items()):
        want = known.get(name)
        if want is None:
            ctx.fail(
                f"{name} is not a metric of {vllm}: what reads vLLM's names finds nothing there",
                expected="one of vLLM's families",
                received=name,
            )
            continue
        if name in rules.token_buckets:
            want = {**want, "buckets": token_buckets(ctx, got.get("buckets"))}
        for part in ("type", "labels", "buckets"):
            if want.get(part) is not None and got.get(part) != want[part]:
                ctx.fail(
                    f"{name}: its {part} differs from {vllm}'s",
                    expected=want[part],
                    received=got.get(part),
                )
    missing = [name for name in rules.required if name not in theirs]
    ctx.expect(
        not missing,
        f"families vLLM's dashboard, gateways and autoscalers read are not exported: "
        f"{', '.join(missing)}",
        expected=list(rules.required),
        received=sorted(theirs),
    )


def token_buckets(ctx: Context, got: list[float] | None) -> list[float]:
    """A token-count family's buckets as vLLM builds them: 1, 2, 5, 10, ... up to the model's
    max_model_len; where the deployment did not say its max_model_len, up to any length (the
    series of `got`'s top bucket), so that a length the gate cannot know is no finding."""
    model = ctx.config.model
    if "max_model_len" in ctx.server.given.get(model, frozenset()) or not got:
        return ctx.api.metrics.one_two_five(ctx.max_model_len)
    return ctx.api.metrics.one_two_five(int(got[-1]))


COUNTERS = {
    "vllm:request_success": "requests",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:generation_tokens": "completion_tokens",
}


@register("metrics:counters_move", tags=TAGS, tokens=SENT * MAX_TOKENS)
def counters_move(ctx: Context) -> None:
    """Requests finished, prompt and generation tokens grow by at least what this check's own
    requests used (other traffic may add more, never less)."""
    before = scrape(ctx, counter_totals)
    used: dict[str, Any] = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for _ in range(SENT):
        reply = ctx.client.post(
            ctx.api.completions_path,
            {"model": ctx.config.model, "prompt": "The sky is", "max_tokens": MAX_TOKENS},
        )
        ctx.expect_status(reply, 200, fatal=True)
        usage = reply.data.get("usage") if isinstance(reply.data, dict) else None
        used["requests"] += 1
        for key in ("prompt_tokens", "completion_tokens"):
            used[key] += (
                usage.get(key, 0)
                if isinstance(usage, dict) and isinstance(usage.get(key), int)
                else 0
            )
    after = scrape(ctx, counter_totals)
    for name, key in COUNTERS.items():
        grew = after.get(name, 0.0) - before.get(name, 0.0)
        ctx.expect(
            grew >= used[key],
            f"{name} grew by {grew:g} over {SENT} requests that used {used[key]} {key}",
            expected=f"at least {used[key]}",
            received=grew,
        )
