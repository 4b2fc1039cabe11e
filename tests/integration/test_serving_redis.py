"""Newest-wins on the real Redis and on a real Redis Cluster (3 masters, 3 replicas): the Lua
compare-and-set under any interleaving of out-of-order and duplicate deliveries, with concurrent
writers on separate connections. Every test runs against both (`serving_redis`)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precast.redis_client import close as redis_close
from precast.redis_client import connect
from precast.serving import EXPIRED, FUTURE, OLDER, STORED, RedisStore
from tests.serving_cases import (
    BASE_MS,
    HORIZON_MS,
    deliveries,
    expected_newest,
    expected_validity,
    interleavings,
    lease,
    lease_deliveries,
    leased,
    prediction,
)


@pytest.fixture
def store(serving_redis):
    s = RedisStore(connect(serving_redis), f"{serving_redis.key_prefix}{uuid.uuid4().hex[:6]}:")
    yield s
    s.purge(lambda d, e: True)
    redis_close(s.client)


def fresh(redis_settings) -> RedisStore:
    return RedisStore(
        connect(redis_settings), f"{redis_settings.key_prefix}{uuid.uuid4().hex[:8]}:"
    )


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), items=deliveries)
def test_redis_keeps_newest_under_any_interleaving(serving_redis, data, items):
    store = fresh(serving_redis)
    order = data.draw(interleavings(items))
    # one delivery per script call, and batched calls: both paths must hold
    half = len(order) // 2
    for d, e in order[:half]:
        store.put_if_newer(d, e, now_ms=BASE_MS)
    store.put_many_if_newer(order[half:], now_ms=BASE_MS, chunk=7)
    got = {d: e.key for d, e in store.iterate()}
    store.purge(lambda d, e: True)
    redis_close(store.client)
    assert got == expected_newest(items)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=deliveries, writers=st.integers(2, 5), rnd=st.randoms())
def test_redis_concurrent_writers(serving_redis, items, writers, rnd):
    prefix = f"{serving_redis.key_prefix}{uuid.uuid4().hex[:8]}:"
    stores = [RedisStore(connect(serving_redis), prefix) for _ in range(writers)]
    orders = [rnd.sample(items, len(items)) * 2 for _ in range(writers)]
    barrier = threading.Barrier(writers)

    def write(s, order):
        barrier.wait()
        for d, e in order:
            s.put_if_newer(d, e, now_ms=BASE_MS)

    threads = [threading.Thread(target=write, args=a) for a in zip(stores, orders, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = {d: e.key for d, e in stores[0].iterate()}
    stores[0].purge(lambda d, e: True)
    for s in stores:
        redis_close(s.client)
    assert got == expected_newest(items)


def test_tie_break_is_byte_order_like_python(store):
    for a, b in [("1.9.0", "1.10.0"), ("z-1", "é-1"), ("2.0.0", "2.0.0-rc1")]:
        lo, hi = sorted([a, b])
        store.put_if_newer("dev-t", prediction("dev-t", BASE_MS, BASE_MS, hi), BASE_MS)
        assert (
            store.put_if_newer("dev-t", prediction("dev-t", BASE_MS, BASE_MS, lo), BASE_MS) == OLDER
        )
        assert store.get("dev-t").model_version == hi
        store.delete(["dev-t"])


def test_results_ttl_and_values_round_trip(store):
    now = int(time.time() * 1000)
    e = prediction("dev-1", now, now, "1.0.0", horizon_ms=2_000)
    assert store.put_if_newer("dev-1", e) == STORED
    assert store.put_if_newer("dev-1", e) == OLDER
    assert store.get("dev-1") == e
    assert store.get_many(["dev-1", "dev-2"]) == [e, None]
    ttl = store.client.pttl(store.key("dev-1"))
    assert 1_000 < ttl <= 2_000  # valid_until + grace (0) - now
    assert (
        store.put_if_newer("dev-2", prediction("dev-2", now - 10_000, now, "1", horizon_ms=5_000))
        == EXPIRED
    )
    assert store.get("dev-2") is None


def test_purge_is_compare_and_delete(store):
    for i in range(30):
        store.put_if_newer(
            f"dev-{i}",
            prediction(f"dev-{i}", BASE_MS, BASE_MS, "1.0.0" if i % 3 else "2.0.0"),
            BASE_MS,
        )
    newer = prediction("dev-1", BASE_MS + 1, BASE_MS, "1.0.0")

    def predicate(d, e):
        if d == "dev-1":  # a newer prediction lands while the purge is looking at this one
            store.put_if_newer("dev-1", newer, BASE_MS)
        return e.model_version == "1.0.0"

    assert store.purge(predicate) == 19
    assert store.get("dev-1") == newer
    assert store.count() == 11


def test_keys_cannot_be_injected(store):
    e = prediction("dev-1", BASE_MS, BASE_MS, "1")
    for bad in ("x*", "a b", "dev\r\nFLUSHALL", ""):
        with pytest.raises(ValueError):
            store.put_if_newer(bad, e, BASE_MS)
        with pytest.raises(ValueError):
            store.get(bad)


def test_loaded_marker(store):
    assert not store.loaded()
    store.mark_loaded()
    assert store.loaded()
    store.client.delete(store._loaded)


def test_redis_never_keeps_an_answer_computed_in_the_future(store):
    ahead = prediction("dev-f", BASE_MS + 86_400_000, BASE_MS + 86_400_000, "1.0.0")
    real = prediction("dev-r", BASE_MS - 10, BASE_MS, "1.0.0")
    assert store.put_many_if_newer([("dev-f", ahead), ("dev-r", real)], BASE_MS) == [FUTURE, STORED]
    assert store.get("dev-f") is None and store.get("dev-r") is not None


def test_cluster_keys_are_hash_tagged_per_device_and_spread_over_masters(
    redis_cluster_settings,
):
    store = fresh(redis_cluster_settings)
    client = store.client
    assert store.cluster
    # the slot is the device's own: any other key of this device will land beside it
    assert client.keyslot(store.key("dev-42")) == client.keyslot("dev-42")
    items = [
        (f"dev-{i}", prediction(f"dev-{i}", BASE_MS + i, BASE_MS, "1.0.0")) for i in range(600)
    ]
    assert store.put_many_if_newer(items, now_ms=BASE_MS, chunk=250) == [STORED] * 600
    owners = {client.get_node_from_key(store.key(d)).name for d, _ in items}
    assert len(owners) == len(client.get_primaries()) == 3
    assert store.count() == 600
    assert [e.computed_at_ms for e in store.get_many(["dev-0", "dev-599", "dev-x"]) if e] == [
        BASE_MS,
        BASE_MS + 599,
    ]
    assert store.clear() == 600
    redis_close(client)


# -- validity leases (the same cases as tests/unit/test_serving_leases.py) -------------------------
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), deliveries=lease_deliveries)
def test_redis_extends_the_newest_answer_under_the_newest_lease_in_any_order(
    serving_redis, data, deliveries
):
    store = fresh(serving_redis)
    store.grace_ms = 10**9  # nothing expires here: the rule alone decides
    now = BASE_MS + 6_000
    for kind, k, x in data.draw(st.permutations(deliveries + deliveries)):
        if kind == "a":
            store.put_if_newer(k, x, now)
        else:
            store.put_leases([x], now)
    want = expected_validity(deliveries)
    store.mark_loaded()
    book = store.lease_book()
    got = {d: book.resolve(d, store.get(d)).valid_until_ms for d in want}
    store.clear()
    redis_close(store.client)
    assert got == want


def test_an_extendable_answer_lives_in_redis_until_its_terms_end(store):
    now = int(time.time() * 1000)
    e = leased("dev-l", now - 10_000, now - 10_000, 1, extension_ms=60_000)
    assert store.put_if_newer("dev-l", e) == STORED  # past its own validity, within its terms
    ttl = store.client.pttl(store.key("dev-l"))
    assert 49_000 < ttl <= 50_000
    older = leased("dev-l", now - 20_000, now - 20_000, 1, extension_ms=60_000)
    assert store.put_if_newer("dev-l", older) == OLDER  # still blocks older answers
    plain = leased("dev-p", now - 10_000, now - 10_000, None)
    assert store.put_if_newer("dev-p", plain) == EXPIRED


def test_redis_keeps_the_newest_lease_and_readers_apply_it_only_once_loaded(store, serving_redis):
    import asyncio

    from precast.serving import AsyncRedisReader

    now = int(time.time() * 1000)
    e = leased("dev-r", now - 8_000, now - 8_000, 2)
    store.put_if_newer("dev-r", e)
    fresh_lease = lease(0, 2, now - 1_000, now - 900)
    assert store.put_leases([fresh_lease]) == [STORED]
    late = [lease(0, 1, now, now), lease(0, 2, now - 2_000, now), fresh_lease]
    assert store.put_leases(late) == [OLDER, OLDER, OLDER]  # fenced, less certified, duplicate
    assert store.lease(0) == fresh_lease
    assert store.put_leases([lease(1, 2, now - 60_000, now - 60_000)]) == [EXPIRED]

    async def served() -> int:
        reader = AsyncRedisReader(
            serving_redis.model_copy(update={"key_prefix": store._p[: -len("p:{")]})
        )
        reader.lease_cache_s = 0
        try:
            return (await reader.get("dev-r")).valid_until_ms
        finally:
            await reader.close()

    # not loaded (a replay may be under way): the answer's own validity only
    assert asyncio.run(served()) == e.valid_until_ms
    assert store.lease_book().resolve("dev-r", e) is e
    store.mark_loaded()
    assert asyncio.run(served()) == now - 1_000 + HORIZON_MS
    assert store.lease_book().resolve("dev-r", e).valid_until_ms == now - 1_000 + HORIZON_MS
    store.clear()
    assert store.lease(0) is None
