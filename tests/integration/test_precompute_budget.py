"""The precompute budget on the real Redis: dedup shared by replicas (SET NX PX), one ceiling
for all of them (a Lua token bucket on one key), and the per-replica fallback when Redis does
not answer."""

from __future__ import annotations

import asyncio
import time

from consumer_api.speculation.precompute_budget import RedisBudget
from precast.redis_client import connect_async
from precast.settings import RedisSettings


def test_replicas_share_dedup_and_one_ceiling(redis_settings, unique):
    async def scenario():
        prefix = unique("budget") + ":"
        a = RedisBudget(connect_async(redis_settings), prefix, rate_per_s=10, burst=10)
        b = RedisBudget(connect_async(redis_settings), prefix, rate_per_s=10, burst=10)
        ids = [f"d{i}" for i in range(30)]
        first = await a.admit(ids[:6], 60_000)
        second = await b.admit(ids[:12], 60_000)  # 6 asked by replica a, 6 new
        assert first.admitted == ids[:6]
        assert second.deduplicated == ids[:6] and second.admitted == ids[6:10]
        assert second.over_budget == ids[10:12]  # burst of 10 shared: 6 + 4
        # refused ones were not marked: once the bucket refills they can be asked
        await asyncio.sleep(0.35)
        again = await a.admit(ids[10:12], 60_000)
        assert again.admitted == ids[10:12]
        t0 = time.monotonic()
        admitted = 0
        while time.monotonic() - t0 < 1.0:  # two replicas flooding for a second
            for r in (a, b):
                admitted += len(
                    (await r.admit([unique(f"x{time.monotonic_ns()}")], 60_000)).admitted
                )
            await asyncio.sleep(0.001)
        assert admitted <= 10 * (time.monotonic() - t0) + 2
        ttl = await a.client.pttl(prefix + "rq:" + ids[0])
        assert 0 < ttl <= 60_000
        await a.client.aclose()
        await b.client.aclose()

    asyncio.run(scenario())


def test_without_redis_each_replica_keeps_the_ceiling(unique):
    async def scenario():
        gone = RedisSettings(url="redis://127.0.0.1:1/0", connect_timeout_s=0.2)
        budget = RedisBudget(connect_async(gone), "x:", rate_per_s=5, burst=5)
        d = await budget.admit([f"d{i}" for i in range(8)], 1_000)
        assert len(d.admitted) == 5 and len(d.over_budget) == 3
        await budget.client.aclose()

    asyncio.run(scenario())
