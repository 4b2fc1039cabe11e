"""The budget for speculative work: which precompute requests may go to the workers.

Shared by all replicas through Redis: a device asked for by any replica within the window is
not asked for again (`SET <prefix>rq:<device> 1 NX PX <window>`), and all replicas together
take at most `precompute_budget_per_s` requests a second from one token bucket (a Lua script
on one key, timed by the Redis clock so replicas' clocks do not matter). Every key is used
alone, so the same calls work on Redis Cluster.

Without Redis, or while it does not answer, each replica keeps the same ceiling on its own
(`LocalBudget`, counted in `precast_api_precompute_budget_fallbacks_total`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import redis
import redis.asyncio
from prometheus_client import Counter

from consumer_api.edge.client_limits import TokenBucket

FALLBACKS = Counter(
    "precast_api_precompute_budget_fallbacks",
    "budget decisions taken per replica because Redis did not answer",
)

# KEYS[1] the bucket; ARGV rate per second, burst, tokens wanted. Returns the tokens granted.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(b[1]), tonumber(b[2])
if tokens == nil or at == nil then tokens, at = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local got = math.min(want, math.floor(tokens))
tokens = tokens - got
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 60000)
return got
"""


@dataclass
class Decision:
    admitted: list[str] = field(default_factory=list)
    deduplicated: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)


class Budget(Protocol):
    async def admit(self, device_ids: Sequence[str], window_ms: int) -> Decision: ...


class LocalBudget:
    """The ceiling of one replica (its own dedup is the asker's per-replica window)."""

    def __init__(self, rate_per_s: float, burst: int, clock=time.monotonic) -> None:
        self._clock = clock
        self._bucket = TokenBucket(rate_per_s, burst, clock())

    def grant(self, n: int) -> int:
        b = self._bucket
        b.refill(self._clock())
        got = min(n, int(b.tokens))
        b.tokens -= got
        return got

    async def admit(self, device_ids: Sequence[str], window_ms: int) -> Decision:
        got = self.grant(len(device_ids))
        return Decision(list(device_ids[:got]), [], list(device_ids[got:]))


class RedisBudget:
    """Dedup and ceiling shared by every replica pointing at the same Redis and key prefix."""

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        key_prefix: str,
        rate_per_s: float,
        burst: int,
    ) -> None:
        self.client, self.rate, self.burst = client, rate_per_s, burst
        self._dedup = key_prefix + "rq:"
        self._bucket = key_prefix + "rq-budget"
        self._take = client.register_script(_TAKE)
        self.local = LocalBudget(rate_per_s, burst)

    async def admit(self, device_ids: Sequence[str], window_ms: int) -> Decision:
        if not device_ids:
            return Decision()
        try:
            return await self._shared(device_ids, window_ms)
        except (redis.RedisError, OSError):
            FALLBACKS.inc(len(device_ids))
            return await self.local.admit(device_ids, window_ms)

    async def _shared(self, device_ids: Sequence[str], window_ms: int) -> Decision:
        pipe = self.client.pipeline(transaction=False)
        for d in device_ids:
            pipe.set(self._dedup + d, b"1", nx=True, px=window_ms)
        won = await pipe.execute()
        new = [d for d, ok in zip(device_ids, won, strict=True) if ok]
        dup = [d for d, ok in zip(device_ids, won, strict=True) if not ok]
        got = int(await self._take([self._bucket], [self.rate, self.burst, len(new)])) if new else 0
        admitted, over = new[:got], new[got:]
        if over:  # not asked after all: another read may ask once there is budget again
            undo = self.client.pipeline(transaction=False)
            for d in over:
                undo.delete(self._dedup + d)
            await undo.execute()
        return Decision(admitted, dup, over)
