"""The Budget in Redis, shared by every replica of the API (redis-py).

One Redis string per key, `acs:budget:<sha256 of the API key>`, holds the key's
remaining tokens; a key not seen before starts at `initial`. Reserve and settle
are each one Lua script, which Redis runs atomically: one round trip, and no
interleaving of replicas can spend the same tokens twice or lose an update.
The script only does the arithmetic under Redis's lock; the Hold itself, and the
429, come from the core's `hold()` applied to what the key had before.

Fail closed: while Redis cannot be reached, reserve raises 503
inference_unavailable (so nothing is generated without a Hold), and the server
logs one line when it goes and one when it is back. redis-py reconnects by
itself on the next command; a script that a restarted Redis no longer has is
loaded again by redis-py's Script. A settlement that cannot reach Redis is
logged and dropped: the key keeps paying its whole Hold, never less.
"""

from __future__ import annotations

import logging
import threading

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from api_server.budget.protocol import key_id, redacted
from contract import CompletionRequest, Hold, InferenceUnavailable, InsufficientQuota, hold

log = logging.getLogger("api_server")

PREFIX = "acs:budget:"
# Short: a completion waits at most this long for a Redis that is gone before its 503.
CONNECT_TIMEOUT_S = 1.0
COMMAND_TIMEOUT_S = 2.0

# KEYS[1]: the key's Budget. ARGV: initial, prompt tokens, sequences, max_tokens.
# Returns {remaining before, tokens taken}; takes nothing when not one token fits.
# The same arithmetic as contract.hold (the caller checks that they agree).
RESERVE = """
local remaining = tonumber(redis.call('GET', KEYS[1]) or ARGV[1])
local prompt, sequences, max_tokens = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local take = prompt + sequences * max_tokens
if take > remaining then
  local fits = 0
  if remaining > prompt then fits = math.floor((remaining - prompt) / sequences) end
  if fits < 1 then return {remaining, 0} end
  take = prompt + sequences * fits
end
redis.call('SET', KEYS[1], remaining - take)
return {remaining, take}
"""
# KEYS[1]: the key's Budget. ARGV[1]: tokens given back. A key that is gone (a Redis
# that lost its data) is left alone: it starts again at `initial`, credited nothing.
SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBY', KEYS[1], ARGV[1]) end
return false
"""


class RedisBudget:
    """Remaining tokens per key in Redis at `url`, starting at `initial` for a key not seen before."""

    def __init__(self, url: str, initial: int) -> None:
        self.url, self.initial = redacted(url), initial
        # No retries but one, at once, on a broken connection (a pooled one that a
        # restarted Redis closed); none on a timeout, where the script may have run. (A
        # connection that breaks after Redis ran the script could take a Hold twice: the
        # key would pay more, never less.)
        # redis-py's pool opens connections lazily and anew in each forked worker.
        self.client = redis.Redis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=COMMAND_TIMEOUT_S,
            retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        )
        self._reserve = self.client.register_script(RESERVE)
        self._settle = self.client.register_script(SETTLE)
        self._lock = threading.Lock()
        self._down = False

    def _failed(self, error: redis.RedisError) -> InferenceUnavailable:
        with self._lock:
            first, self._down = not self._down, True
        if first:
            log.error(
                "Budget store %s is unreachable (%s: %s): completions get 503 "
                "inference_unavailable until it is back",
                self.url,
                type(error).__name__,
                error,
            )
        return InferenceUnavailable.from_template("inference_unavailable")

    def _reached(self) -> None:
        if self._down:
            with self._lock:
                back, self._down = self._down, False
            if back:
                log.warning("Budget store %s is reachable again", self.url)

    def reserve(self, key: str, req: CompletionRequest) -> Hold:
        counts = req.prompt_token_counts
        sequences = len(counts) * req.n
        try:
            before, taken = self._reserve(
                keys=[PREFIX + key_id(key)],
                args=[self.initial, sum(counts), sequences, req.max_tokens],
            )
        except redis.RedisError as error:
            raise self._failed(error) from None
        self._reached()
        before, taken = int(before), int(taken)
        try:
            expected = hold(counts, req.n, req.max_tokens, before).amount
        except InsufficientQuota:
            expected = 0
        if taken != expected:  # a bug: give the tokens back, answer 500
            self._settle(keys=[PREFIX + key_id(key)], args=[taken])
            raise RuntimeError(
                f"the Budget's script took {taken} tokens, the core's Hold is {expected}"
            )
        return hold(counts, req.n, req.max_tokens, before)  # the core's 429 when nothing was taken

    def settle(self, key: str, held: Hold, used: int) -> None:
        try:
            self._settle(keys=[PREFIX + key_id(key)], args=[held.amount - used])
        except redis.RedisError as error:
            self._failed(error)
            log.error(
                "Budget store %s: a settlement was lost; the key paid its whole Hold of %d "
                "tokens instead of %d",
                self.url,
                held.amount,
                used,
            )
            return
        self._reached()

    def remaining(self, key: str) -> int:
        """The key's remaining tokens (for operators and tests)."""
        value = self.client.get(PREFIX + key_id(key))
        return self.initial if value is None else int(value)

    def set_remaining(self, key: str, tokens: int) -> None:
        """Set the key's remaining tokens (for operators and tests)."""
        self.client.set(PREFIX + key_id(key), tokens)
