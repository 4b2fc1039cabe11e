"""Every reader of the read API and the auditor survives every record (issue 36, deliverable 1):
whatever a record (or a value read back from Redis) holds, it either decodes to a valid entry or
ends as a counted rejection with a reason; no exception escapes the reader's boundary. And each
reader's loop is supervised: a failure restarts it (counted), one that keeps failing turns
readiness false (deliverable 3)."""

from __future__ import annotations

import logging
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.appender import Appender
from consumer_api.board.feed import FEED, BoardFeed
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.materialize.materializer import Materializer
from precast.audit.batch import prepare
from precast.audit.checkpoint import load_or_create_signer
from precast.audit.compact import CompactRange
from precast.audit.leaf import leaf_data
from precast.audit.store import LogStore
from precast.guard import REJECTED
from precast.kafka import KafkaMessage, Record
from precast.serving import Entry, MemoryStore, decode, encode
from precast.serving.redis_store import RedisStore
from precast.settings import KafkaSettings
from precast.supervise import Supervised
from schemas.topics import catalog
from tests.hostile_records import deep_object, nested, records
from tests.worker_events import heartbeat

NOWHERE = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # nothing is ever sent or read
# Taken when the module is collected: a whole suite may run for many minutes before these tests
# do, so answers stay valid for hours (the materializer judges them by the clock at run time).
NOW = int(time.time() * 1000)
HOURS = 6 * 3_600_000
TOPIC = "t.predictions"
LEASE_KEY = b"#lease:1"
_UNSAFE = re.compile(r'[\x00-\x20\x7f"\\]')


def _valid_prediction(device: str = "dev-1") -> dict[str, Any]:
    return {
        "schema_version": 1,
        "device_id": device,
        "candidates": [{"strategy": "remote_restart", "score": 0.7}],
        "model_version": "1.0.0",
        "computed_at_ms": NOW - 1_000,
        "valid_until_ms": NOW + HOURS,
        "produced_at_ms": NOW - 900,
        "trigger": "heartbeat",
        "lease": {"partition": 1, "generation": 1, "until_ms": NOW + 2 * HOURS},
        "lineage": [{"topic": "t.heartbeats", "partition": 0, "offset": 3}],
    }


_VALID_LEASE = {
    "kind": "validity_lease",
    "partition": 1,
    "generation": 1,
    "certified_at_ms": NOW - 500,
    "valid_until_ms": NOW + 30_000,
    "produced_at_ms": NOW - 400,
}


def rejected(reader: str) -> float:
    """precast_records_rejected_total of `reader`, every reason summed (from that counter
    alone: a lookup in the whole registry collects every metric, 1 ms each, per reason)."""
    return sum(
        s.value
        for metric in REJECTED.collect()
        for s in metric.samples
        if s.name == "precast_records_rejected_total" and s.labels["reader"] == reader
    )


def predictions_records() -> st.SearchStrategy[Record]:
    return st.one_of(
        records(TOPIC, _valid_prediction(), b"dev-1"),
        records(TOPIC, _VALID_LEASE, LEASE_KEY),
    )


class FakeConsumer:
    """Hands out the records it is given, then nothing; `fail` raises on the next consume."""

    def __init__(self) -> None:
        self.queue: list[KafkaMessage] = []
        self.fail: Callable[[], None] | None = None
        self.assigned: list[Any] = []

    def _take(self, *_: object) -> list[KafkaMessage]:
        if self.fail is not None:
            self.fail()
        out, self.queue = self.queue, []
        return out

    consume_available = consume = _take

    def assign(self, parts: list[Any]) -> None:
        self.assigned.append(parts)

    def commit(self, *_: object, **__: object) -> None:
        return

    def close(self) -> None:
        return


def materializer(supervised: Supervised | None = None) -> tuple[Materializer, MemoryStore]:
    view = MemoryStore()
    mat = Materializer(NOWHERE, TOPIC, 6, view=view, supervised=supervised)
    mat._source._c = FakeConsumer()  # type: ignore[assignment]
    return mat, view


# -- the API's materializer --------------------------------------------------------------------
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(predictions_records())
def test_the_materializer_stores_or_counts_every_record(record):
    mat, _ = materializer()
    took: list[Any] = []
    apply, apply_leases = mat._apply, mat._apply_leases

    def spy(items: list[Any], now: int) -> None:
        took.extend(items)
        apply(items, now)

    def spy_leases(leases: list[Any], now: int) -> None:
        took.extend(leases)
        apply_leases(leases, now)

    mat._apply, mat._apply_leases = spy, spy_leases  # type: ignore[method-assign]
    mat._source._c.queue = [record]  # type: ignore[attr-defined]
    before, counted = mat.guard.rejected, rejected("api-materializer")
    mat.run_once(0)  # raises nothing, whatever the record holds
    if not record.value():
        assert mat.guard.rejected == before and not took  # a tombstone: nothing to order by
        return
    assert len(took) + (mat.guard.rejected - before) == 1  # taken or rejected, exactly once
    assert rejected("api-materializer") == counted + (0 if took else 1)
    for item in took:
        if isinstance(item, tuple):
            _, e = item
            assert _UNSAFE.search(e.model_version) is None
            assert b"\n" not in e.body and b"\r" not in e.body and e.body.endswith(b"}")
            assert decode(encode(e)) == e  # what Redis would hold reads back as it was


def test_a_deep_record_is_rejected_and_the_next_valid_one_is_served():
    """The issue's record: a valid prediction whose ignored field nests 5000 levels."""
    mat, view = materializer()
    poison = orjson.dumps(_valid_prediction())[:-1] + b',"zz":' + nested() + b"}"
    good = orjson.dumps(_valid_prediction("dev-2"))
    mat._source._c.queue = [  # type: ignore[attr-defined]
        Record(TOPIC, 0, 0, b"dev-1", poison),
        Record(TOPIC, 0, 1, b"dev-1", b'{"x":' * 5000 + b"1" + b"}" * 5000),
        Record(TOPIC, 0, 2, b"dev-2", good),
    ]
    mat.run_once(0)
    assert mat.guard.rejected == 2
    assert view.get("dev-2", NOW) is not None and view.get("dev-1", NOW) is None


# -- values read back from Redis ---------------------------------------------------------------
class FakeRedis:
    def __init__(self, values: dict[str, bytes]) -> None:
        self.values = values

    def register_script(self, _: str) -> None:
        return None

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def mget(self, ks: list[str]) -> list[bytes | None]:
        return [self.values.get(k) for k in ks]


def _stored(version: str = "1.0.0") -> Entry:
    return Entry(NOW, NOW + 1, version, NOW + 60_000, NOW + 2, 5, False, b'{"a":1}')


_REDIS_VALUES = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            encode(_stored()).replace(b"1.0.0", b"1.0\r\nSet-Cookie: x=1"),
            encode(_stored()).replace(b"1.0.0", b'1"0'),
            encode(_stored()).replace(b"1.0.0", b"\xff\xfe"),
            encode(_stored()).replace(b" 5 ", b" 99999999999999999999 "),
            encode(_stored()).replace(b'{"a":1}', b'{"a":\n1}'),
            encode(_stored()).replace(b'{"a":1}', b"[1]"),
            encode(_stored()).split(b"\n")[0],
            b"-1 -1 -1 -1 - - v\n{}",
            b"1 2 3 4 5 6 7 8\n{}",
        ]
    ),
    st.binary(max_size=120).map(lambda b: encode(_stored()) + b),
    st.binary(max_size=60).map(lambda b: b + encode(_stored())),
)


@settings(max_examples=300)
@given(_REDIS_VALUES)
def test_a_value_read_back_from_redis_is_an_entry_or_a_counted_miss(raw):
    store = RedisStore(FakeRedis({"x:p:{dev-1}": raw}), "x:")  # type: ignore[arg-type]
    before = rejected("redis-entries")
    got = store.get("dev-1")
    [again] = store.get_many(["dev-1"])
    assert got == again
    if got is None:
        assert rejected("redis-entries") == before + 2  # both reads counted it
        return
    assert rejected("redis-entries") == before
    assert _UNSAFE.search(got.model_version) is None and len(got.model_version) <= 128
    assert b"\n" not in got.body and b"\r" not in got.body and got.body[-1:] == b"}"
    assert decode(encode(got)) == got


def test_a_header_injection_through_redis_is_a_miss_never_a_header():
    raw = encode(_stored()).replace(b"1.0.0", b"1.0\r\nX-Evil: 1")
    store = RedisStore(FakeRedis({"x:p:{dev-1}": raw}), "x:")  # type: ignore[arg-type]
    assert store.get("dev-1") is None
    assert store.get("dev-2") is None  # nothing stored: a plain miss


# -- the auditor's leaves ----------------------------------------------------------------------
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(predictions_records())
def test_every_record_gets_a_leaf_and_an_unusable_one_is_counted(record):
    why: list[BaseException] = []
    batch = prepare(TOPIC, [record], CompactRange(0, []), lambda exc, _m: why.append(exc))
    [leaf] = batch.leaves
    assert leaf.offset == record.offset() and batch.tree.size == 1
    if record.value() is None:
        assert leaf.kind == "tombstone" and not why
    elif leaf.kind == "invalid":
        assert len(why) == 1
    else:
        assert leaf.kind in ("prediction", "lease") and not why
        for n in (leaf.computed_at_ms, leaf.produced_at_ms):
            assert n is None or -(2**63) <= n < 2**63  # what SQLite holds


def _at_depth(n: int, fn: Callable[[], bytes]) -> bytes:
    return fn() if n == 0 else _at_depth(n - 1, fn)


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 1200), st.sampled_from([b"[", b'{"a":']))
def test_a_leaf_is_the_same_at_any_stack_depth(depth, opener):
    """`precast audit verify` recomputes leaves on a deeper stack than the appender's: a
    recursion limit must not make them differ."""
    closer = b"]" if opener == b"[" else b"}"
    doc = orjson.dumps(_valid_prediction())[:-1] + b',"zz":' + opener * depth
    value = doc + (b"1" if opener != b"[" else b"") + closer * depth + b"}"
    shallow = leaf_data(TOPIC, 0, 7, b"dev-1", value)
    limit = sys.getrecursionlimit()
    deep = _at_depth(min(700, limit - 200), lambda: leaf_data(TOPIC, 0, 7, b"dev-1", value))
    assert shallow == deep


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(predictions_records(), min_size=1, max_size=6))
def test_the_appender_appends_a_leaf_for_every_record(batch):
    with tempfile.TemporaryDirectory() as d:
        app = _appender(Path(d))
        msgs: list[KafkaMessage] = [
            Record(TOPIC, 0, i, r.key(), r.value(), r.headers()) for i, r in enumerate(batch)
        ]
        app.append(msgs)  # raises nothing
        assert app.tree.size == len(msgs) and app.offsets == {0: len(msgs)}
        app.store.close()


def _appender(d: Path, supervised: Supervised | None = None) -> Appender:
    signer = load_or_create_signer(d / "key", "test.example/log")
    return Appender(
        LogStore(d / "log.db"),
        signer,
        FakeConsumer(),  # type: ignore[arg-type]
        None,
        topic=TOPIC,
        checkpoint_topic=None,
        partitions=1,
        supervised=supervised,
    )


def test_the_appender_survives_the_deep_record_and_appends_what_follows(tmp_path):
    app = _appender(tmp_path)
    before = app.guard.rejected
    poison = orjson.dumps(_valid_prediction())[:-1] + b',"zz":' + nested() + b"}"
    app.append(
        [
            Record(TOPIC, 0, 0, b"dev-1", poison),
            Record(TOPIC, 0, 1, b"dev-1", deep_object()),
            Record(TOPIC, 0, 2, b"dev-2", orjson.dumps(_valid_prediction("dev-2"))),
        ]
    )
    assert app.tree.size == 3 and app.guard.rejected == before + 2
    app.store.close()


# -- the board feed ----------------------------------------------------------------------------
_TOPICS = catalog("x.", 3)


def _board_feed(supervised: Supervised | None = None) -> BoardFeed:
    index = FleetIndex(default_strategy="monitor_only", serve_stale=False, grace_ms=0)
    feed = BoardFeed(NOWHERE, _TOPICS, index, supervised=supervised)
    feed._consumer = FakeConsumer()  # type: ignore[assignment]
    feed._next_rates = float("inf")  # no end offsets asked of a broker that is not there
    return feed


def _feed_samples() -> float:
    return sum(
        s.value
        for metric in FEED.collect()  # that counter alone: the registry holds every metric
        for s in metric.samples
        if s.name.endswith("_total")
    )


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        records(_TOPICS.heartbeats.name, heartbeat("dev-1", NOW), b"dev-1"),
        records(_TOPICS.device_context.name, {"device_id": "dev-1", "v": 2}, b"dev-1"),
    ),
    st.booleans(),
)
def test_the_board_feed_reads_or_counts_every_record(record, heartbeats_topic):
    feed = _board_feed()
    topic = _TOPICS.heartbeats.name if heartbeats_topic else _TOPICS.device_context.name
    msg = Record(topic, 0, 0, record.key(), record.value(), record.headers())
    feed._consumer.queue = [msg]  # type: ignore[attr-defined]
    seen = _feed_samples()
    assert feed.run_once(0) == 1  # raises nothing, whatever the record holds
    tombstone = topic == _TOPICS.device_context.name and not msg.value()
    assert _feed_samples() == seen + (0 if tombstone else 1)  # each record one result


# -- supervision -------------------------------------------------------------------------------
def _wait(cond: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.01)


class _Once:
    """Raises on its first `n` calls."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self) -> None:
        if self.n > 0:
            self.n -= 1
            raise RuntimeError("injected")


def _policy(gave_up: list[str]) -> Supervised:
    return Supervised(
        f"test-{len(gave_up)}-{time.monotonic_ns()}",
        max_restarts=2,
        backoff_s=0.001,
        on_give_up=lambda part, exc: gave_up.append(part),
    )


def test_a_materializer_that_raises_is_restarted_and_counted():
    gave_up: list[str] = []
    mat, view = materializer(_policy(gave_up))
    consumer = mat._source._c
    consumer.fail = _Once(1)  # type: ignore[attr-defined]
    consumer.queue = [Record(TOPIC, 0, 0, b"dev-2", orjson.dumps(_valid_prediction("dev-2")))]  # type: ignore[attr-defined]
    mat._caught_up.set()
    mat._thread.start()
    try:
        _wait(lambda: view.get("dev-2", NOW) is not None, "the record after the restart")
        assert mat.supervised.restarts == 1 and mat.ready and not gave_up
        assert consumer.assigned  # type: ignore[attr-defined]  # resumed from its positions
    finally:
        mat._stop.set()
        mat._thread.join(5)


def test_a_materializer_that_keeps_raising_turns_readiness_false():
    gave_up: list[str] = []
    mat, _ = materializer(_policy(gave_up))
    mat._source._c.fail = _Once(10**9)  # type: ignore[attr-defined]
    mat._caught_up.set()
    assert mat.ready
    mat._thread.start()
    mat._thread.join(20)
    assert gave_up == [mat.supervised.part]
    assert not mat.ready and mat.error is not None and not mat._thread.is_alive()


def test_a_board_feed_that_raises_is_restarted_then_gives_up():
    gave_up: list[str] = []
    feed = _board_feed(_policy(gave_up))
    feed._consumer.fail = _Once(1)  # type: ignore[attr-defined]
    feed._thread.start()
    _wait(lambda: feed.supervised.restarts == 1, "a restart")
    assert feed.healthy
    feed._consumer.fail = _Once(10**9)  # type: ignore[attr-defined]
    feed._thread.join(20)
    assert gave_up and not feed.healthy and feed.error is not None


def test_an_appender_that_raises_is_restarted_from_its_log_then_gives_up(tmp_path):
    gave_up: list[str] = []
    app = _appender(tmp_path, _policy(gave_up))
    consumer: FakeConsumer = app.consumer  # type: ignore[assignment]
    consumer.fail = _Once(1)
    consumer.queue = [Record(TOPIC, 0, 0, b"dev-2", orjson.dumps(_valid_prediction("dev-2")))]
    runner = threading.Thread(target=app.run, daemon=True)
    runner.start()
    _wait(lambda: app.tree.size == 1, "the record after the restart")
    assert app.supervised.restarts == 1 and app.error is None and len(consumer.assigned) == 2
    consumer.fail = _Once(10**9)
    runner.join(20)
    assert gave_up and app.error is not None and not runner.is_alive()


def test_the_api_readiness_names_the_board_feed_once_it_gives_up():
    from consumer_api.cli import build
    from consumer_api.settings import ApiSettings
    from precast.http.parts import down

    built = build(
        ApiSettings(
            kafka={"bootstrap_servers": "127.0.0.1:1"}, redis={"url": ""}, api={"board": True}
        )
    )
    feed = built.board_feed
    assert feed is not None and "api-board-feed" not in down(built.service.parts)
    feed.supervised.failure = RuntimeError("injected")
    assert "api-board-feed" in down(built.service.parts)


# -- validity leases: the record decoder and the value Redis keeps ------------------------------
@settings(max_examples=300)
@given(records(TOPIC, _VALID_LEASE, LEASE_KEY))
def test_a_lease_record_is_a_lease_or_a_counted_rejection(record):
    from precast.guard import Guard
    from precast.serving import Lease, lease_from_record

    guard = Guard("test-leases", logging.getLogger("test"))
    got = guard.decode(lambda m: lease_from_record(m.value(), m.key(), NOW, m.offset()), record)
    if got is None:
        assert guard.rejected == 1
        return
    assert isinstance(got, Lease) and guard.rejected == 0
    assert record.key() in (None, LEASE_KEY) and got.partition == 1  # None: not checked
    assert got.certified_at_ms <= got.valid_until_ms < 10**13


@settings(max_examples=200)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.lists(st.integers(-(2**70), 2**70), max_size=8).map(
            lambda xs: b" ".join(b"%d" % x for x in xs)
        ),
    )
)
def test_a_lease_read_back_from_redis_is_a_lease_or_a_counted_miss(raw):
    store = RedisStore(FakeRedis({"x:lease:{1}": raw}), "x:")  # type: ignore[arg-type]
    before = rejected("redis-entries")
    got = store.lease(1)
    if got is None:
        assert rejected("redis-entries") == before + 1
    else:
        assert got.partition == 1 and max(got.generation, got.certified_at_ms) < 10**13


def test_the_async_reader_answers_a_miss_for_a_value_it_cannot_trust():
    """With LOCAL_VIEW=false every read goes through AsyncRedisReader: a model version with
    CR/LF written into Redis by anyone is a counted miss there too, never a header."""
    import asyncio

    from precast.serving import AsyncRedisReader
    from precast.settings import RedisSettings

    raw = encode(_stored()).replace(b"1.0.0", b"1.0\r\nSet-Cookie: a=b")
    good = encode(_stored())

    class Client:
        async def get(self, key: str) -> bytes:
            return raw if key.endswith("{dev-1}") else good

        async def mget(self, ks: list[str]) -> list[bytes]:
            return [await self.get(k) for k in ks]

        async def aclose(self) -> None:
            return None

    reader = AsyncRedisReader(RedisSettings(url="redis://127.0.0.1:1", key_prefix="x:"))
    reader.client = Client()  # type: ignore[assignment]
    before = rejected("redis-entries")
    assert asyncio.run(reader.get("dev-1")) is None
    got = asyncio.run(reader.get_many(["dev-1", "dev-2"]))
    assert got[0] is None and got[1] == _stored()
    assert rejected("redis-entries") == before + 2
