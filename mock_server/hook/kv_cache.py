"""The mock's KV cache, in vLLM's blocks (x-metrics.mock_kv_cache: block_size tokens a block,
num_gpu_blocks in all): what vllm:kv_cache_usage_perc shows without the load model, and the
prefix cache behind vllm:prefix_cache_queries and _hits.

As vLLM's (vllm/v1/core/kv_cache_manager.py): a prompt's full blocks are keyed by a hash
chained from the first block, so a block is found only after the same prefix; a lookup may
reuse at most the prompt less its last token (that one is computed to sample from); the blocks
are cached when allocated, so n siblings of one prompt find the first one's; a freed block
stays cached until the room is needed, the least recently used going first. One cache a
worker process, as the load model's batch is one a process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence


class KvCache:
    """`num_blocks` blocks of `block_size` tokens: those held by the requests running, and a
    prefix cache of full prompt blocks."""

    def __init__(self, block_size: int, num_blocks: int) -> None:
        self.block_size, self.num_blocks = block_size, num_blocks
        self.held = 0  # blocks held by the sequences running
        self._cached: OrderedDict[int, None] = OrderedDict()  # block hash, least recent first
        self._lock = threading.Lock()

    def _hashes(self, prompt: Sequence[int]) -> list[int]:
        size, parent, out = self.block_size, 0, []
        for start in range(0, len(prompt) - size + 1, size):
            parent = hash((parent, *prompt[start : start + size]))
            out.append(parent)
        return out

    def prefill(self, prompt: Sequence[int]) -> int:
        """A sequence of `prompt` scheduled: its cached tokens (full blocks of a prefix seen
        before, the last token always computed); its full blocks are cached from now."""
        hashes = self._hashes(prompt)
        usable = (len(prompt) - 1) // self.block_size
        with self._lock:
            hits = 0
            for h in hashes[:usable]:
                if h not in self._cached:
                    break
                hits += 1
            for h in hashes:
                self._cached[h] = None
                self._cached.move_to_end(h)
            while len(self._cached) > self.num_blocks:
                self._cached.popitem(last=False)
        return hits * self.block_size

    def blocks(self, tokens: int) -> int:
        """The blocks `tokens` tokens of one sequence take."""
        return -(-tokens // self.block_size)

    def hold(self, blocks: int) -> float:
        """`blocks` more held (fewer when negative); the share of all blocks now held."""
        with self._lock:
            self.held += blocks
            return min(self.held / self.num_blocks, 1.0) if self.num_blocks else 0.0
