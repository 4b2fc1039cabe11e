"""10,000 fuzzed bad records among good events: every bad one ends on the dead-letter topic
with its reason and its original bytes, the consumer keeps going, no good event is lost."""

from __future__ import annotations

import collections
import time

from precast.deadletter import DeadLetters, dead_letter_info, original_headers, original_key
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from producers.badrecords import BAD_KINDS, H_BAD_KIND, BadRecord
from producers.publisher import EventPublisher
from producers.simulator import Fleet
from schemas.deadletters import Reason
from tests.integration.validating_consumer import ValidatingConsumer

BAD_TARGET = 10_000


def read_all(
    kafka_settings,
    group: str,
    topic_names: list[str],
    partitions: int,
    expect: int,
    timeout: float = 60,
):
    """Every record of the given topics, from the beginning (assign, no group commits)."""
    c = Consumer(kafka_settings, group)
    c.assign(
        [
            TopicPartitionOffset(t, p, OFFSET_BEGINNING)
            for t in topic_names
            for p in range(partitions)
        ]
    )
    out, deadline = [], time.monotonic() + timeout
    while len(out) < expect and time.monotonic() < deadline:
        out += c.consume(5000, 0.5)
    out += c.consume(5000, 1.0)  # anything beyond `expect` would be a duplicate: catch it
    c.close()
    return out


def where_it_stopped(consumer, topic_names: list[str], partitions: int) -> str:
    """Each partition's position, committed offset and watermarks, for a run that ended short:
    whether the records it missed are on the broker at all (a consumer stall) or not (lost)."""
    parts = [TopicPartitionOffset(t, p, 0) for t in topic_names for p in range(partitions)]
    pos = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(parts)}
    done = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(parts)}
    assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    rows, stored = [], 0
    for tp in parts:
        k = (tp.topic, tp.partition)
        low, high = consumer.watermarks(*k)
        stored += high - low
        if done[k] != high or k not in assigned:
            rows.append(
                f"{k}: assigned {k in assigned}, position {pos[k]}, committed {done[k]}, "
                f"watermarks {low}..{high}"
            )
    where = "; ".join(rows) or "every partition committed to its high watermark"
    return f"{stored} records on the broker; {where}"


def test_fuzzed_bad_records_all_dead_lettered_with_reasons(kafka_settings, topics, unique):
    # Half the records injured, so 10k bad ones come with about as many good ones, on all three
    # event topics (speedup makes alarms and work orders frequent enough to be injured too).
    fleet = Fleet(2_000, seed=11, bad_rate=0.5, speedup=3_000, run_id="dlq")
    sent_bad: list[BadRecord] = []
    sent_good: dict[str, str] = {}  # event_id -> kind
    with EventPublisher(Producer(kafka_settings), topics) as publisher:
        while len(sent_bad) < BAD_TARGET:
            for r in fleet.step(1_000, int(time.time() * 1000)):
                if isinstance(r, BadRecord):
                    if len(sent_bad) < BAD_TARGET:
                        publisher.publish_raw(r.role, r.key, r.value, r.headers)
                        sent_bad.append(r)
                else:
                    publisher.publish(r)
                    sent_good[r["event_id"]] = r["kind"]
    assert set(BAD_KINDS) == {r.kind for r in sent_bad}
    assert {"heartbeat", "alarm", "work_order"} <= set(sent_good.values())

    roles = {t.name: t.role for t in topics.events()}
    producer = Producer(kafka_settings)
    consumer = Consumer(kafka_settings, unique("dlq-consumer"))
    vc = ValidatingConsumer(
        consumer,
        producer,
        roles,
        DeadLetters(producer, topics.dead_letters.name, "test-consumer"),
        batch_max=2_000,
    )
    vc.subscribe()
    accepted: collections.Counter[str] = collections.Counter()
    total, rejected = len(sent_bad) + len(sent_good), 0
    consumed, deadline = 0, time.monotonic() + 120

    def handle(batch):
        for _msg, verdict in batch:
            accepted[verdict.event["event_id"]] += 1

    while consumed < total and time.monotonic() < deadline:
        res = vc.run_once(handle)
        consumed += res.consumed
        rejected += res.rejected
    short = "" if consumed == total else where_it_stopped(consumer, list(roles), 3)
    consumer.close()
    # the consumer went through everything: no bad record stopped it, no good event was lost
    assert consumed == total, short
    assert rejected == BAD_TARGET
    assert set(accepted) == set(sent_good) and max(accepted.values()) == 1

    parts = topics.dead_letters.partitions
    letters = read_all(
        kafka_settings, unique("dlq-read"), [topics.dead_letters.name], parts, BAD_TARGET
    )
    assert len(letters) == BAD_TARGET
    sources = read_all(
        kafka_settings, unique("src-read"), list(roles), topics.heartbeats.partitions, total
    )
    by_position = {(m.topic(), m.partition(), m.offset()): m for m in sources}
    reasons: collections.Counter[str] = collections.Counter()
    for d in letters:
        info = dead_letter_info(d.headers())
        kind = dict(original_headers(d.headers()))[H_BAD_KIND].decode()
        assert info["reason"] == BAD_KINDS[kind].value, (kind, info)
        assert info["detail"] and info["component"] == "test-consumer"
        src = by_position[
            (info["source.topic"], int(info["source.partition"]), int(info["source.offset"]))
        ]
        # original key, value and headers, byte for byte
        assert original_key(d.key(), d.headers()) == src.key()
        assert d.value() == src.value()
        assert original_headers(d.headers()) == list(src.headers() or [])
        reasons[info["reason"]] += 1
    assert set(reasons) == {r.value for r in BAD_KINDS.values()}
    assert sum(reasons.values()) == BAD_TARGET
    assert Reason.TOMBSTONE.value in reasons and reasons[Reason.MISSING_KEY.value] > 0
