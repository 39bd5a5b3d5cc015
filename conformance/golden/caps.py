"""caps.yaml: each size cap (x-caps, x-token-rules) at its bound and one past it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conformance.golden.cases import FILLER, PROMPT, Cases, case, error


class CapCases(Cases):
    """caps.yaml: caps that need the tokenizer, and the model's limits."""

    def caps(self) -> Iterator[dict[str, Any]]:
        c, m, t = self.api.caps, self.model, ["caps"]
        b = {"model": m.name, "prompt": PROMPT}
        cap, wait = c["max_generated_tokens"], c["max_tokens_without_stream"]
        half = cap // 2
        yield case(
            "caps.generated.at",
            "prompts x n x max_tokens at the cap",
            t,
            {**b, "n": 2, "max_tokens": half, "stream": True},
            200,
            generates=2 * half,
        )
        yield case(
            "caps.generated.past",
            "prompts x n x max_tokens one past the cap",
            t,
            {**b, "n": 2, "max_tokens": half + 1, "stream": True},
            400,
            self.rule(
                "generated_tokens_cap",
                "x-token-rules",
                cap=cap,
                n=2,
                max_tokens=half + 1,
                prompts=1,
                total=2 * (half + 1),
            ),
        )
        yield case(
            "caps.generated.prompts.past",
            "two prompts count twice",
            t,
            {**b, "prompt": [PROMPT, PROMPT], "max_tokens": half + 1, "stream": True},
            400,
            self.rule(
                "generated_tokens_cap",
                "x-token-rules",
                cap=cap,
                n=1,
                max_tokens=half + 1,
                prompts=2,
                total=2 * (half + 1),
            ),
        )
        yield case(
            "caps.generated.single.past",
            "one sequence over the cap",
            t,
            {**b, "max_tokens": cap + 1, "stream": True},
            400,
            self.rule(
                "generated_tokens_cap",
                "x-token-rules",
                cap=cap,
                n=1,
                max_tokens=cap + 1,
                prompts=1,
                total=cap + 1,
            ),
        )
        yield case(
            "caps.without_stream.at",
            "max_tokens at the no-stream limit",
            t,
            {**b, "max_tokens": wait},
            200,
            generates=wait,
        )
        # the prompt fills the context: the no-stream cap comes first (x-token-rules' order),
        # and a server that wrongly accepts the request has room for one token only
        yield case(
            "caps.without_stream.past",
            "max_tokens one past the no-stream limit, checked before the context",
            t,
            {
                **b,
                "prompt": {"$token_ids": {"count": m.max_model_len - 1, "id": FILLER}},
                "max_tokens": wait + 1,
            },
            400,
            self.rule(
                "deadline_infeasible",
                "x-token-rules",
                cap=wait,
                max_tokens=wait + 1,
                minutes=c["wait_seconds"] // 60,
            ),
        )
        # One tags list for the family: the YAML writes it once and refers to it after.
        yield from self._context(b, t)
        yield from self._capture(b)
        yield from self._model_limits(b)
        yield from self._body(b, t)

    def _context(self, b: dict[str, Any], t: list[str]) -> Iterator[dict[str, Any]]:
        """max_model_len against the prompt and max_tokens, and min_tokens."""
        m, wait = self.model, self.api.caps["max_tokens_without_stream"]
        fit = m.max_model_len - wait
        yield case(
            "caps.context.at",
            "prompt + max_tokens = max_model_len",
            t,
            {**b, "prompt": {"$token_ids": {"count": fit, "id": FILLER}}, "max_tokens": wait},
            200,
            generates=wait,
        )
        yield case(
            "caps.context.past",
            "prompt + max_tokens = max_model_len + 1",
            t,
            {**b, "prompt": {"$token_ids": {"count": fit + 1, "id": FILLER}}, "max_tokens": wait},
            400,
            self.rule(
                "context_length",
                "x-token-rules",
                max_model_len=m.max_model_len,
                total=m.max_model_len + 1,
                prompt_tokens=fit + 1,
                max_tokens=wait,
            ),
        )
        yield case(
            "caps.default_max_tokens.at",
            "a prompt of max_model_len - 1 leaves one token",
            t,
            {**b, "prompt": {"$token_ids": {"count": m.max_model_len - 1, "id": FILLER}}},
            200,
            generates=1,
        )
        yield case(
            "caps.default_max_tokens.past",
            "a prompt of max_model_len leaves none",
            t,
            {**b, "prompt": {"$token_ids": {"count": m.max_model_len, "id": FILLER}}},
            400,
            self.rule(
                "prompt_too_long",
                "x-token-rules",
                max_model_len=m.max_model_len,
                prompt_tokens=m.max_model_len,
            ),
        )
        yield case(
            "caps.prompt_too_long.with_max_tokens",
            "a prompt of max_model_len with max_tokens given: the prompt is the field to fix",
            t,
            {
                **b,
                "prompt": {"$token_ids": {"count": m.max_model_len, "id": FILLER}},
                "max_tokens": 2,
            },
            400,
            self.rule(
                "prompt_too_long",
                "x-token-rules",
                max_model_len=m.max_model_len,
                prompt_tokens=m.max_model_len,
            ),
        )
        yield case(
            "caps.min_tokens.at",
            "min_tokens = max_tokens",
            t,
            {**b, "max_tokens": 2, "min_tokens": 2},
            200,
            generates=2,
        )
        yield case(
            "caps.min_tokens.past",
            "min_tokens = max_tokens + 1",
            t,
            {**b, "max_tokens": 2, "min_tokens": 3},
            400,
            self.rule("min_tokens_above_max_tokens", "x-token-rules", min_tokens=3, max_tokens=2),
        )

    def _body(self, b: dict[str, Any], t: list[str]) -> Iterator[dict[str, Any]]:
        """The body size cap (every route)."""
        size = self.api.caps["max_body_bytes"]
        small = {**b, "max_tokens": 1}
        yield case(
            "caps.body.at",
            "a body of exactly the cap",
            t + ["http"],
            small,
            200,
            generates=1,
            body_bytes=size,
        )
        yield case(
            "caps.body.past",
            "a body one byte over the cap",
            t + ["http"],
            small,
            413,
            error(
                "request_too_large",
                self.api.messages["request_too_large"].format(limit=size),
                None,
                self.api,
            ),
            body_bytes=size + 1,
        )

    def _capture(self, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
        m, t = self.model, ["caps", "lens"]
        cap, layers = m.capture_cap, list(range(m.num_layers))
        per_layer = cap // len(layers)  # positions when every layer is captured
        for label, lay, positions in (("all_layers", layers, per_layer), ("one_layer", [0], cap)):
            # positions = prompt tokens + max_tokens - 1, with max_tokens 1 or 2
            prompt_ok = positions - 1
            body = {
                **b,
                "prompt": {"$token_ids": {"count": prompt_ok, "id": FILLER}},
                "max_tokens": 2,
                "output_residual_stream": lay,
            }
            yield case(
                f"caps.capture.{label}.at",
                "Layers x tokens at the capture cap",
                t,
                body,
                200,
                generates=2,
            )
            yield case(
                f"caps.capture.{label}.past",
                "Layers x tokens one token past the cap",
                t,
                {**body, "max_tokens": 3},
                400,
                self.rule(
                    "capture_cap",
                    "x-token-rules",
                    cap=cap,
                    layers=len(lay),
                    positions=positions + 1,
                    total=len(lay) * (positions + 1),
                ),
            )

    def _model_limits(self, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
        m, t = self.model, ["validation"]
        vocab = m.vocab_size
        for param in self.api.model_rules["token_id_in_vocab"]["params"]:
            body = {**b, "max_tokens": 1}
            ok = {**body, param: [vocab - 1]}
            bad = {**body, param: [FILLER, vocab]}
            yield case(f"model.{param}.vocab.at", "the last token id", t, ok, 200, generates=1)
            yield case(
                f"model.{param}.vocab.past",
                "one past the vocabulary",
                t,
                bad,
                400,
                error(
                    self.api.model_rules["token_id_in_vocab"]["code"],
                    self._model_msg(
                        "token_id_in_vocab", token_id=vocab, param=param, vocab_size=vocab
                    ),
                    param,
                    self.api,
                ),
            )
        yield case(
            "model.top_k.at",
            "top_k = vocabulary size",
            t,
            {**b, "max_tokens": 1, "top_k": vocab},
            200,
            generates=1,
        )
        yield case(
            "model.top_k.past",
            "top_k one past the vocabulary",
            t,
            {**b, "max_tokens": 1, "top_k": vocab + 1},
            400,
            error(
                self.api.model_rules["top_k_in_vocab"]["code"],
                self._model_msg("top_k_in_vocab", value=vocab + 1, vocab_size=vocab),
                "top_k",
                self.api,
            ),
        )
        yield case(
            "model.layers.at",
            "the last layer",
            t + ["lens"],
            {**b, "max_tokens": 1, "output_residual_stream": [m.num_layers - 1]},
            200,
            generates=1,
        )
        yield case(
            "model.layers.past",
            "one past the last layer",
            t + ["lens"],
            {**b, "max_tokens": 1, "output_residual_stream": [0, m.num_layers]},
            400,
            error(
                self.api.model_rules["layer_in_range"]["code"],
                self._model_msg(
                    "layer_in_range",
                    layer=m.num_layers,
                    param="output_residual_stream",
                    num_layers=m.num_layers,
                ),
                "output_residual_stream",
                self.api,
            ),
        )
