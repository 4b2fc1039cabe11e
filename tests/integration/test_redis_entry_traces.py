"""An answer's trace context in the shared store (issue 39): on the real Redis, an entry with a
`traceparent` reads back with it through the store and the read path's async reader, a value
without one (as every value before the field existed) reads back without it, and newest-wins
compares the two kinds as ever (the Lua scripts read only the header line)."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest

from precast.redis_client import close as redis_close
from precast.redis_client import connect
from precast.serving import STORED, AsyncRedisReader, RedisStore, encode, prediction_item
from tests.api_fixtures import now_ms

TRACE = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _entry(device: str, computed: int, trace: bytes | None):
    doc = {
        "schema_version": 1,
        "device_id": device,
        "candidates": [{"strategy": "remote_restart", "score": 0.7}],
        "model_version": "1.0.0",
        "computed_at_ms": computed,
        "valid_until_ms": computed + 60_000,
        "produced_at_ms": computed + 20,
        "trigger": "heartbeat",
        "lineage": [],
    }
    return prediction_item(orjson.dumps(doc), computed + 30, None, trace)[1]


@pytest.fixture
def store(redis_settings):
    prefix = f"{redis_settings.key_prefix}{uuid.uuid4().hex[:6]}:"
    s = RedisStore(connect(redis_settings), prefix)
    yield s, redis_settings.model_copy(update={"key_prefix": prefix})
    s.clear()
    redis_close(s.client)


def test_traced_and_untraced_entries_read_back_and_order_as_ever(store):
    s, settings = store
    now = now_ms()
    traced, plain = _entry("d1", now - 100, TRACE), _entry("d2", now - 100, None)
    # d2 as a replica before this change wrote it: the same bytes as an untraced entry today
    s.client.set(s.key("d2"), encode(plain), px=60_000)
    assert s.put_many_if_newer([("d1", traced)], now) == [STORED]
    assert s.get("d1") == traced and s.get("d1").trace == TRACE
    assert s.get("d2") == plain and s.get("d2").trace is None

    async def read() -> list:
        reader = AsyncRedisReader(settings)
        try:
            return [await reader.get("d1"), *(await reader.get_many(["d1", "d2"]))]
        finally:
            await reader.close()

    assert [e.trace for e in asyncio.run(read())] == [TRACE, TRACE, None]
    # newest-wins across the two kinds: an older traced answer never replaces a newer one, and
    # a newer one of either kind replaces the older
    assert s.put_if_newer("d2", _entry("d2", now - 200, TRACE), now) != STORED
    assert s.put_if_newer("d2", _entry("d2", now - 50, TRACE), now) == STORED
    assert s.put_if_newer("d1", _entry("d1", now - 50, None), now) == STORED
    assert s.get("d1").trace is None and s.get("d2").trace == TRACE
