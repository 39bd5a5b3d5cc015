"""Token caps (x-token-rules): they need the prompt's tokens, so they come last."""

from __future__ import annotations

from contract.errors import rule_error
from contract.spec import ModelInfo, Spec


class TokenCaps:
    """One spec's token caps, its x-token-rules and the request's defaults they read."""

    def __init__(self, api: Spec) -> None:
        self.caps, self.rules = api.caps, api.token_rules
        self.defaults = api.defaults("CompletionRequest")

    def default_max_tokens(self, prompt_tokens: int, model: ModelInfo, stream: bool) -> int:
        """max_model_len less the prompt, at most the generated-token cap (less without stream)."""
        caps = self.caps
        ceiling = caps["max_generated_tokens"] if stream else caps["max_tokens_without_stream"]
        return min(model.max_model_len - prompt_tokens, ceiling)

    def check_generated(self, body: dict, prompts: int) -> None:
        """The generated-token cap, before any prompt is tokenized, when max_tokens is given (then it
        is the first token cap resolve_max_tokens checks): 2 million one-character prompts would
        otherwise be tokenized, 300 MiB of token lists, only to be refused here."""
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            return
        cap = self.caps["max_generated_tokens"]
        n = int(body.get("n", self.defaults["n"]))
        total = prompts * n * int(max_tokens)
        if total > cap:
            raise rule_error(
                self.rules["generated_tokens_cap"],
                cap=cap,
                n=n,
                max_tokens=int(max_tokens),
                prompts=prompts,
                total=total,
            )

    def resolve_max_tokens(self, body: dict, prompt_tokens: list[int], model: ModelInfo) -> int:
        """The max_tokens Inference runs with, or the first token cap the request breaks."""
        caps, rules, defaults = self.caps, self.rules, self.defaults
        stream = bool(body.get("stream", defaults["stream"]))
        longest = max(prompt_tokens)
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = self.default_max_tokens(longest, model, stream)
            if max_tokens < 1:
                raise rule_error(
                    rules["prompt_too_long"],
                    max_model_len=model.max_model_len,
                    prompt_tokens=longest,
                )
        max_tokens = int(max_tokens)
        n, prompts = int(body.get("n", defaults["n"])), len(prompt_tokens)
        total = prompts * n * max_tokens
        if total > caps["max_generated_tokens"]:
            raise rule_error(
                rules["generated_tokens_cap"],
                cap=caps["max_generated_tokens"],
                n=n,
                max_tokens=max_tokens,
                prompts=prompts,
                total=total,
            )
        layers = body.get("output_residual_stream")
        if layers:
            positions = longest + max_tokens - 1
            if len(layers) * positions > model.capture_cap:
                raise rule_error(
                    rules["capture_cap"],
                    cap=model.capture_cap,
                    layers=len(layers),
                    positions=positions,
                    total=len(layers) * positions,
                )
        if not stream and max_tokens > caps["max_tokens_without_stream"]:
            raise rule_error(
                rules["deadline_infeasible"],
                cap=caps["max_tokens_without_stream"],
                max_tokens=max_tokens,
                minutes=caps["wait_seconds"] // 60,
            )
        if longest >= model.max_model_len:
            # the prompt leaves no token to generate, whatever max_tokens says: the prompt is the
            # field to fix (param), never max_tokens, which no value of could help
            raise rule_error(
                rules["prompt_too_long"], max_model_len=model.max_model_len, prompt_tokens=longest
            )
        if longest + max_tokens > model.max_model_len:
            raise rule_error(
                rules["context_length"],
                max_model_len=model.max_model_len,
                total=longest + max_tokens,
                prompt_tokens=longest,
                max_tokens=max_tokens,
            )
        min_tokens = body.get("min_tokens", defaults["min_tokens"])
        if min_tokens > max_tokens:
            raise rule_error(
                rules["min_tokens_above_max_tokens"], min_tokens=min_tokens, max_tokens=max_tokens
            )
        return max_tokens
