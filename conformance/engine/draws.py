"""Values a server could key on to tell the gate from a client, drawn per run from the run's seed
(RunConfig.seed, which every report prints; `--seed` draws them again): the seed of the seeded
requests and the other seeds beside it, the other temperatures the seed is tried at, the
premise's prompt, schemathesis's seed, and the probes of checks/drawn.py (prompts cut from the
shipped corpus, max_tokens, temperatures, stop strings' lengths, n). A server that honours only
what the gate asked last run meets other values this run.

How the probes are sized: each dimension a probe draws (max_tokens, a prompt's length, a stop
string's length, ...) is drawn once in each of PROBES strata of its range, in a shuffled order.
A server wrong on a quarter of a range misses every draw with odds at most 0.75^16 = 1.0% (by
the arithmetic-geometric mean inequality over the strata: never worse than 16 independent
draws), and a server wrong on a quarter that is one stretch of the range (above some length,
say) meets at least three draws of it in every run."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from conformance.spec.corpus import passage, sentences

SEEDS = range(1, 2**31)  # what clients send: positive, within any server's 32-bit seed
# The seed is tried at temperature 1 and at two of these: each far enough from 0 that a server
# dropping the seed samples other tokens (checks/determinism.py sizes its repeats for 0.7).
TEMPERATURES = (0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 1.4)
# One-word prompts every completions server takes as text (premise:max_tokens).
PROMPTS = ("The", "A", "In", "It", "We", "This", "On", "He")


PROBES = 16  # draws of each dimension: 0.75^16 = 1.0% (above)
# max_tokens of the counted probes, log-stratified: past 16 (the legacy default, a cut many
# proxies make) and up to what the ceiling of scripts/main.sh holds with the rest of the run
# (their sum is about 16 x 55 = 880 tokens)
MAX_TOKENS = (17, 128)
PROMPT_CHARS = (48, 1400)  # a prompt cut from the corpus: about 12 to 320 tokens
# every probe is seeded, at a temperature over the API's range but its greedy 0 (the other checks
# hold greedy answers): a temperature far from 1 shows (checks/drawn.py: drawn:temperature)
TEMPERATURES_DRAWN = (0.25, 2.0)
# the probes at a temperature in this stretch ask a top_p of TOP_P (drawn:top_p): the second
# quarter of the temperatures drawn, up to 1. The others are held to their temperature alone,
# where a server that samples at 1 shows most (a top_p of the likeliest token's own share keeps
# that token at either temperature: nothing shows)
TOP_P_TEMPERATURES = (0.6875, 1.0)
TOP_P = (0.3, 0.95)
# the probes at a temperature in this stretch (the third quarter) ask a top_k of TOP_K: the
# temperature held with a top_k too, where the rows show the whole of what is sampled from
TOP_K_TEMPERATURES = (1.125, 1.5625)
TOP_K = (2, 20)
STOP_CHARS = (2, 16)  # a stop string's characters, taken from a probe's own answer
STOP_WITHIN = 32  # characters: where in that answer a stop string starts (it stops early: cheap)
DEFAULT_ROOM = (17, 40)  # tokens a max_model_len prompt leaves to the default max_tokens: past
# 16, the legacy default a server may put in its place
# n of model:n.children, one from each: a server that copies one sample for n of 4 or more, or of
# 9 or more, meets it in every run
N_STRATA = ((2, 3), (4, 8), (9, 16))


def stratified(rng: random.Random, low: float, high: float, *, log: bool = False) -> list[float]:
    """PROBES values of [low, high], one drawn in each of PROBES equal strata (of the logarithm
    with `log`), shuffled."""
    a, b = (math.log(low), math.log(high)) if log else (low, high)
    width = (b - a) / PROBES
    out = [a + (i + rng.random()) * width for i in range(PROBES)]
    rng.shuffle(out)
    return [math.exp(v) for v in out] if log else out


@dataclass(frozen=True)
class Probe:
    """One request of checks/drawn.py: a corpus prompt, counted tokens, seeded."""

    prompt: str
    max_tokens: int
    temperature: float
    seed: int
    top_p: float | None  # asked by the probes at TOP_P_TEMPERATURES
    top_k: int | None  # asked by the probes at TOP_K_TEMPERATURES
    stop_chars: int  # the stop string's length (checks/drawn.py takes it from the answer)
    stop_at: int  # where in the answer's first STOP_WITHIN characters it starts
    stream_stop: bool  # the stopped request is streamed


def _probes(rng: random.Random) -> tuple[Probe, ...]:
    tokens = stratified(rng, MAX_TOKENS[0], MAX_TOKENS[1] + 1, log=True)
    chars = stratified(rng, *PROMPT_CHARS, log=True)
    temperatures = [round(t, 2) for t in stratified(rng, *TEMPERATURES_DRAWN)]
    top_ps = stratified(rng, *TOP_P)
    top_ks = stratified(rng, TOP_K[0], TOP_K[1] + 1)
    stops = stratified(rng, STOP_CHARS[0], STOP_CHARS[1] + 1)
    starts = rng.sample(range(len(sentences())), PROBES)
    return tuple(
        Probe(
            prompt=passage(starts[i], round(chars[i])),
            max_tokens=int(tokens[i]),
            temperature=temperatures[i],
            seed=rng.randrange(SEEDS.start, SEEDS.stop),
            top_p=(
                round(top_ps[i], 3)
                if TOP_P_TEMPERATURES[0] <= temperatures[i] <= TOP_P_TEMPERATURES[1]
                else None
            ),
            top_k=(
                int(top_ks[i])
                if TOP_K_TEMPERATURES[0] <= temperatures[i] < TOP_K_TEMPERATURES[1]
                else None
            ),
            stop_chars=int(stops[i]),
            stop_at=rng.randrange(1, STOP_WITHIN),
            stream_stop=i % 4 < 2,
        )
        for i in range(PROBES)
    )


@dataclass(frozen=True)
class Draws:
    seed: int  # the seeded requests' (checks/stream.py seeded_body)
    other_seeds: tuple[int, int]  # determinism:seed.differs's, never the seed above
    temperatures: tuple[float, float]  # determinism:seed's beside 1
    premise_prompt: str
    schemathesis_seed: int
    probes: tuple[Probe, ...] = ()
    default_room: int = DEFAULT_ROOM[0]
    n: tuple[int, ...] = (3,)

    @classmethod
    def of(cls, run_seed: int) -> Draws:
        rng = random.Random(f"draws:{run_seed}")
        seed, *others = rng.sample(SEEDS, 3)
        low, high = sorted(rng.sample(TEMPERATURES, 2))
        first = (seed, (others[0], others[1]), (low, high), rng.choice(PROMPTS))
        schemathesis_seed = rng.randrange(2**32)
        # drawn after the values above, so that a run's seed draws those as before
        return cls(
            *first,
            schemathesis_seed,
            _probes(rng),
            rng.randint(*DEFAULT_ROOM),
            tuple(rng.randint(*s) for s in N_STRATA),
        )
