"""What a read API replica keeps grows with what it serves now, not with how long it has run
(issue 27: two replicas grew by 20-29 % in RSS in a 10-minute soak on a slower machine; on one
core the workers, lagging by 100k records, grew too). Each structure that takes something per
device or per record has its bound checked here; the prefetch bound itself is measured against
a real broker in tests/integration/test_consumer_prefetch.py."""

from __future__ import annotations

import asyncio

import pytest

import consumer_api.board.feed
import consumer_api.board.lineage
import consumer_api.materialize.materializer
import consumer_api.materialize.source
import workers.precompute.assembly
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.read.hub import Hub
from consumer_api.speculation.precompute_budget import LocalBudget
from consumer_api.speculation.precompute_requests import PrecomputeAsker
from consumer_api.speculation.read_hints import ReadHints
from precast.kafka import Producer
from precast.settings import KafkaSettings
from schemas.topics import catalog
from tests.api_fixtures import prediction

# Nothing listens here: produce() only queues in librdkafka, which is all these tests need.
NOWHERE = KafkaSettings(bootstrap_servers="127.0.0.1:9")


class _Built(Exception):
    pass


@pytest.mark.parametrize(
    ("module", "build"),
    [
        (
            consumer_api.materialize.source,  # its own consumer and its gate's: topic_consumer
            lambda: consumer_api.materialize.materializer.Materializer(NOWHERE, "p", 3, view=None),
        ),
        (
            consumer_api.board.feed,
            lambda: consumer_api.board.feed.BoardFeed(
                NOWHERE,
                catalog("x.", 3),
                FleetIndex(default_strategy="monitor_only", serve_stale=False, grace_ms=0),
            ),
        ),
        (
            consumer_api.board.lineage,
            lambda: consumer_api.board.lineage.LineageReader(NOWHERE, {"x.heartbeats"}, "g").read(
                [{"topic": "x.heartbeats", "partition": 0, "offset": 0}]
            ),
        ),
        (
            workers.precompute.assembly,
            lambda: workers.precompute.assembly.assemble(NOWHERE, catalog("x.", 3), None),  # type: ignore[arg-type]
        ),
    ],
    ids=["materializer", "board-feed", "lineage", "worker"],
)
def test_every_long_running_consumer_bounds_its_prefetch(monkeypatch, module, build):
    """A consumer that falls behind holds what librdkafka fetched ahead: up to 100,000 records
    with the defaults. Every consumer of an API replica and the worker's ask for a bound."""
    seen: list[dict] = []

    def consumer(*_a, **kw):
        seen.append(kw)
        raise _Built

    monkeypatch.setattr(module, "Consumer", consumer)
    with pytest.raises(_Built):
        build()
    assert seen and all(kw.get("bounded_prefetch") for kw in seen)


def test_precompute_windows_are_forgotten_once_ended():
    """The asker remembers each asked device until its window ends; ended windows are dropped
    once a window, so the table holds the devices asked in the last two windows at most, not
    every device ever asked (it was cleared only at 500,000 entries)."""
    window = 1_000
    asker = PrecomputeAsker(Producer(NOWHERE), "requests", window, budget=LocalBudget(1e9, 10**9))
    for t in range(0, 60_000, 100):  # 10 new devices every 100 ms for a minute
        for i in range(10):
            assert asker.request(f"dev-{t}-{i}", "api_miss", t) == "queued"
        asyncio.run(asker.drain())
        # asked within the last two windows: at most 2 * 10 * (window / 100) devices
        assert asker.tracked <= 2 * 10 * window // 100
    assert asker.tracked >= 10 * window // 100  # the current window is still remembered


def test_read_hints_forget_every_device_at_each_flush():
    hints = ReadHints(Producer(NOWHERE), "hints", 30_000, max_devices=1_000)
    for round_ in range(5):
        for i in range(5_000):
            hints.note(f"dev-{round_}-{i}")
            hints.prefetched(f"pre-{round_}-{i}")
        assert len(hints._prefetched) <= 1_000
        hints.flush(1_000 * round_)
        assert not hints._read and not hints._prefetched


def test_hub_forgets_a_device_when_its_last_stream_ends():
    hub = Hub()
    subs = [hub.subscribe([f"dev-{s}-{i}" for i in range(200)]) for s in range(50)]
    assert len(hub.watched()) == 50 * 200
    for s in subs:
        hub.unsubscribe(s)
    assert hub.watched() == set()


def test_fleet_index_history_and_change_log_are_bounded():
    index = FleetIndex(
        default_strategy="monitor_only",
        serve_stale=False,
        grace_ms=0,
        history_depth=4,
        history_devices=100,
        log_size=1_000,
    )
    for r in range(20):
        index.stored([(f"dev-{i}", prediction(f"dev-{i}", 1_000 + r)) for i in range(300)])
    assert len(index._history) <= 100
    assert all(len(h) <= 3 for h in index._history.values())
    assert len(index._log) <= 1_000


def test_board_history_keeps_what_it_shows_not_the_answers_bodies():
    """Earlier answers are kept as `Past` (times, model, trigger, candidates JSON), not as the
    Entry with its body and lineage; the change log holds one interned ID per change. Kept
    whole, both filled for as long as a soak ran (issue 27)."""
    index = FleetIndex(
        default_strategy="monitor_only", serve_stale=False, grace_ms=0, history_depth=3
    )
    for r in range(3):
        # a fresh str per record, as a decoder makes them
        index.stored(
            [("".join(["dev-", str(i)]), prediction(f"dev-{i}", 1_000 + r)) for i in range(5)]
        )
    kept = index._history["dev-1"]
    assert [type(p).__name__ for p in kept] == ["Past", "Past"]
    assert not any(hasattr(p, "body") for p in kept)
    assert all(len(p.candidates) < 120 for p in kept)  # the body is ~330 bytes here
    latest = next(k for k in index._latest if k == "dev-1")
    assert all(d is latest for d in index._log if d == "dev-1")  # one object, not one a record
    items = index.detail("dev-1")["history"]
    assert [h["computed_at_ms"] for h in items] == [1_002, 1_001, 1_000]
    assert [h["candidates"][0]["strategy"] for h in items] == ["remote_restart"] * 3
    assert {h["trigger"] for h in items} == {"heartbeat"}


def test_change_log_resumes_from_any_sequence_it_still_holds():
    index = FleetIndex(default_strategy="monitor_only", serve_stale=False, grace_ms=0, log_size=10)
    for i in range(25):
        index.stored([(f"dev-{i}", prediction(f"dev-{i}", 1_000))])
    assert index.seq == 25
    assert index._since(25) == set()
    assert index._since(20) == {f"dev-{i}" for i in range(20, 25)}
    assert index._since(15) == {f"dev-{i}" for i in range(15, 25)}  # the oldest it holds
    assert index._since(14) is None  # change 15 is gone: reload
    assert index._since(26) is None
