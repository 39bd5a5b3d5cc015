"""rules.yaml: each cross-field rule (x-rules, x-model-rules), accepted and refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conformance.golden.cases import FILLER, PROMPT, Cases, case, error


class RuleCases(Cases):
    """rules.yaml: the cross-field rules (x-rules) and an unknown model."""

    def rules(self) -> Iterator[dict[str, Any]]:
        b = {"model": self.model.name, "prompt": PROMPT}
        t = ["validation"]
        threshold = self.api.greedy_below
        examples: dict[str, list[tuple[str, dict[str, Any]]]] = {
            "max_tokens_required": [
                ("n", {**b, "n": 2}),
                ("prompts", {**b, "prompt": [PROMPT, PROMPT]}),
                ("token_prompts", {**b, "prompt": [[FILLER], [FILLER]]}),
            ],
            "greedy_n": [
                ("zero", {**b, "n": 2, "max_tokens": 1, "temperature": 0}),
                ("below", {**b, "n": 2, "max_tokens": 1, "temperature": threshold * 0.9}),
            ],
            "stream_options_without_stream": [
                ("absent", {**b, "max_tokens": 1, "stream_options": {"include_usage": True}}),
                ("false", {**b, "max_tokens": 1, "stream": False, "stream_options": {}}),
            ],
            "continuous_usage_without_include_usage": [
                (
                    "absent",
                    {
                        **b,
                        "max_tokens": 1,
                        "stream": True,
                        "stream_options": {"continuous_usage_stats": True},
                    },
                )
            ],
            "prompt_logprobs_with_stream": [
                ("", {**b, "max_tokens": 1, "stream": True, "prompt_logprobs": 1})
            ],
            "lens_one_prompt": [
                (
                    "capture",
                    {
                        **b,
                        "max_tokens": 1,
                        "prompt": [PROMPT, PROMPT],
                        "output_residual_stream": [0],
                    },
                )
            ],
            "lens_one_choice": [
                ("capture", {**b, "max_tokens": 1, "n": 2, "output_residual_stream": [0]})
            ],
        }
        for rid, cases in examples.items():
            for label, body in cases:
                cid = f"rule.{rid}" + (f".{label}" if label else "")
                yield case(cid, f"x-rules {rid}", t, body, 400, self.rule(rid))
        ok = [
            ("greedy_n.at_threshold", {**b, "n": 2, "max_tokens": 1, "temperature": threshold}, 2),
            (
                "stream_options.with_stream",
                {
                    **b,
                    "max_tokens": 1,
                    "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                },
                1,
            ),
        ]
        for label, body, generates in ok:
            yield case(
                f"rule.ok.{label}",
                "the rule's boundary is valid",
                t,
                body,
                200,
                generates=generates,
            )
        yield case(
            "model.unknown",
            "unknown model",
            t,
            {**self.base, "model": "no-such-model"},
            404,
            error(
                "model_not_found",
                self.api.messages["model_not_found"].format(model="no-such-model"),
                "model",
                self.api,
            ),
        )
