"""Newest-wins on the real Redis: the Lua compare-and-set under any interleaving of
out-of-order and duplicate deliveries, with concurrent writers on separate connections."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precast.redis_client import connect
from precast.serving import EXPIRED, FUTURE, OLDER, STORED, RedisStore
from tests.serving_cases import BASE_MS, deliveries, expected_newest, interleavings, prediction


@pytest.fixture
def store(redis_settings):
    s = RedisStore(connect(redis_settings), f"{redis_settings.key_prefix}{uuid.uuid4().hex[:6]}:")
    yield s
    s.purge(lambda d, e: True)


def fresh(redis_settings) -> RedisStore:
    return RedisStore(
        connect(redis_settings), f"{redis_settings.key_prefix}{uuid.uuid4().hex[:8]}:"
    )


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), items=deliveries)
def test_redis_keeps_newest_under_any_interleaving(redis_settings, data, items):
    store = fresh(redis_settings)
    order = data.draw(interleavings(items))
    # one delivery per script call, and batched calls: both paths must hold
    half = len(order) // 2
    for d, e in order[:half]:
        store.put_if_newer(d, e, now_ms=BASE_MS)
    store.put_many_if_newer(order[half:], now_ms=BASE_MS, chunk=7)
    got = {d: e.key for d, e in store.iterate()}
    store.purge(lambda d, e: True)
    assert got == expected_newest(items)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=deliveries, writers=st.integers(2, 5), rnd=st.randoms())
def test_redis_concurrent_writers(redis_settings, items, writers, rnd):
    prefix = f"{redis_settings.key_prefix}{uuid.uuid4().hex[:8]}:"
    stores = [RedisStore(connect(redis_settings), prefix) for _ in range(writers)]
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
