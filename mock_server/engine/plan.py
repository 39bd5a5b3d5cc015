"""A validated request turned, once, into what the fake engine does with it, as vLLM's
`CompletionRequest.to_sampling_params` turns a request into SamplingParams: how each choice's
tokens are sampled (sampler.Settings), what each choice shows beside its text (Output), and the
request's prompts, seed, n, steering and capture. The engine reads the plan and nothing of the
body: a field's effect on generation is found here, where it enters."""

from __future__ import annotations

from dataclasses import dataclass

from contract import CompletionRequest, ModelInfo, SteeringVector
from mock_server.engine.sampler import Cut, Settings


@dataclass(frozen=True)
class Output:
    """What a choice shows beside its text: vLLM's logprobs, prompt_logprobs, echo and
    return_token_ids."""

    logprobs: int | None  # alternatives a generated token's row lists; None: no rows
    prompt_logprobs: int | None  # alternatives a prompt token's row lists; None: not asked
    echo: bool
    token_ids: bool  # return_token_ids: the prompt's and the choice's ids

    @property
    def prompt_rows(self) -> int | None:
        """How wide the prompt's rows are, where any are shown (echoed logprobs, or
        prompt_logprobs): the wider of the two asks."""
        if self.prompt_logprobs is None and not (self.echo and self.logprobs is not None):
            return None
        return max(self.logprobs or 0, self.prompt_logprobs or 0)


@dataclass(frozen=True)
class Plan:
    """Everything the engine reads of one request."""

    model: ModelInfo
    prompts: list[list[int]]
    prompt_texts: list[str] | None  # the strings, where the prompts were strings
    n: int
    stream: bool
    seed: int | None
    settings: Settings
    output: Output
    steering: list[SteeringVector]
    layers: list[int] | None  # output_residual_stream: the layers captured

    @property
    def prompt_token_counts(self) -> list[int]:
        return [len(p) for p in self.prompts]


def greedy(req: CompletionRequest, greedy_below: float) -> bool:
    """Whether sampling keeps only the likeliest token: a temperature below the spec's
    threshold, top_k 1 or min_p 1."""
    return (
        req.option("temperature") < greedy_below
        or req.option("top_k") == 1
        or req.option("min_p") >= 1
    )


def plan_request(req: CompletionRequest, greedy_below: float) -> Plan:
    """The engine's plan of a request the core validated."""
    is_greedy = greedy(req, greedy_below)
    stop = req.option("stop")
    settings = Settings(
        max_tokens=req.max_tokens,
        min_tokens=req.option("min_tokens"),
        eos_token_id=None if req.option("ignore_eos") else req.model.eos_token_ids[0],
        stop_token_ids=tuple(req.option("stop_token_ids") or ()),
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        include_stop_str_in_output=req.option("include_stop_str_in_output"),
        skip_special_tokens=req.option("skip_special_tokens"),
        allowed_token_ids=tuple(req.option("allowed_token_ids") or ()),
        bad_words=frozenset(w.strip() for w in req.option("bad_words") or ()),
        greedy=is_greedy,
        cut=Cut(
            req.option("top_k"),
            req.option("min_p"),
            req.option("top_p"),
            req.option("temperature") if not is_greedy else 1.0,
        ),
        presence_penalty=req.option("presence_penalty"),
        frequency_penalty=req.option("frequency_penalty"),
        repetition_penalty=req.option("repetition_penalty"),
    )
    output = Output(
        logprobs=req.option("logprobs"),
        prompt_logprobs=req.option("prompt_logprobs"),
        echo=bool(req.option("echo")),
        token_ids=bool(req.option("return_token_ids")),
    )
    return Plan(
        model=req.model,
        prompts=req.prompts,
        prompt_texts=req.prompt_texts,
        n=req.n,
        stream=req.stream,
        seed=req.option("seed"),
        settings=settings,
        output=output,
        steering=req.steering,
        layers=req.layers,
    )
