"""Values a server could key on to tell the gate from a client, drawn per run from the run's seed
(RunConfig.seed, which every report prints; `--seed` draws them again): the seed of the seeded
requests and the other seeds beside it, the other temperatures the seed is tried at, the
premise's prompt, schemathesis's seed. A server that honours only what the gate asked last run
meets other values this run."""

from __future__ import annotations

import random
from dataclasses import dataclass

SEEDS = range(1, 2**31)  # what clients send: positive, within any server's 32-bit seed
# The seed is tried at temperature 1 and at two of these: each far enough from 0 that a server
# dropping the seed samples other tokens (checks/determinism.py sizes its repeats for 0.7).
TEMPERATURES = (0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 1.4)
# One-word prompts every completions server takes as text (premise:max_tokens).
PROMPTS = ("The", "A", "In", "It", "We", "This", "On", "He")


@dataclass(frozen=True)
class Draws:
    seed: int  # the seeded requests' (checks/stream.py seeded_body)
    other_seeds: tuple[int, int]  # determinism:seed.differs's, never the seed above
    temperatures: tuple[float, float]  # determinism:seed's beside 1
    premise_prompt: str
    schemathesis_seed: int

    @classmethod
    def of(cls, run_seed: int) -> Draws:
        rng = random.Random(f"draws:{run_seed}")
        seed, *others = rng.sample(SEEDS, 3)
        low, high = sorted(rng.sample(TEMPERATURES, 2))
        return cls(
            seed, (others[0], others[1]), (low, high), rng.choice(PROMPTS), rng.randrange(2**32)
        )
