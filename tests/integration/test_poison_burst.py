"""Issue 36: a burst of hostile records on every internal topic a worker-side process reads
(heartbeats, work orders, alarms, precompute requests, read hints, device context, worker
state, presence) while a `precast-worker` process runs, then valid records:

- the worker stays alive and ready, before and after a restart that restores the poisoned
  worker-state topic (a forged state record with the spec's tag once made the policy raise at
  the device's next heartbeat, after every restart);
- every valid record after the burst is in some prediction's lineage;
- every poison record on an input topic is dead-lettered with its reason (device-context
  tombstones and snapshots of another spec excepted: those are meaningful, and counted);
- the operator tools' presence reading survives the presence topic's poison;
- nothing is printed as a traceback."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import numpy as np
import orjson

from opsctl.stack.process import free_port
from precast.deadletter import dead_letter_info
from precast.fleet import load_fleet
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from precast.settings import TopicSettings
from tests.hostile_records import deep_object, nested
from tests.integration.worker_support import (
    lineage_refs,
    read_predictions,
    spawn_worker,
    stop,
    wait_ready,
)
from tests.worker_events import alarm, heartbeat, request, work_order
from workers.precompute.state import changelog

DEVICES = [f"burst-{i:02d}" for i in range(12)]
FORGED = "burst-forged"
EXPECT = "x-test-expect-dead-letter"
HOSTILE_HEADERS: list[tuple[str, bytes | None]] = [
    ("traceparent", None),
    ("x-bytes", b"\xff\x00\x1b[2J"),
    ("dlq.reason", b"\x1b[31mforged"),
]


def _with_deep_ignored_field(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event)[:-1] + b',"zz":' + nested() + b"}"


def _poison(
    valid: dict[str, Any], compacted: bool = False
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of the hostile records for a topic whose valid record is `valid` (a
    compacted topic's broker refuses records without a key itself)."""
    key = valid["device_id"].encode()
    out = [
        (key, nested()),
        (key, deep_object()),
        (key, _with_deep_ignored_field(valid)),
        (key, b"\xff\xfe\xfd not UTF-8"),
        (key, b"not json at all"),
        (key, b'{"a": 1e999}'),
        (key, b"NaN"),
        (key, b"9" * 5000),
        (key, b'"' + b"a" * 900_000 + b'"'),  # under the broker's 1 MB, over the contract's
        (key, orjson.dumps({k: [v] for k, v in valid.items()})),  # every field the wrong type
        (None, orjson.dumps(valid)),
        (b"", orjson.dumps(valid)),
        (b"\x1b[2J\r\n", orjson.dumps(valid)),
        (key, None),  # a tombstone
    ]
    if "meta" in valid:  # a field kept raw by the worker's fast decoder, skipped unparsed
        deep_meta = {**valid, "meta": {"q": "MARK"}}
        out.append((key, orjson.dumps(deep_meta).replace(b'"MARK"', nested())))
    return [(k, v) for k, v in out if k or not compacted]


def _is_object(value: bytes) -> bool:
    try:
        return isinstance(orjson.loads(value), dict)
    except orjson.JSONDecodeError:
        return False


def _forged_state() -> bytes:
    """A state record with the spec's tag and size whose last inference names class indexes
    past any model's labels."""
    layout = changelog.Layout(load_fleet().features)
    rec = np.zeros(1, dtype=layout.dtype)
    rec["version"], rec["spec"] = changelog.VERSION, np.void(layout.tag)
    rec["hb_time"] = int(time.time() * 1000) - 60_000
    rec["valid_until"] = int(time.time() * 1000) + 3_600_000
    rec["rank"] = 250  # past any model's labels
    rec["margins"] = 5.0
    return rec.tobytes()


def _marked(dead_lettered: bool) -> list[tuple[str, bytes | None]]:
    """The hostile headers, plus one that says whether the record must be dead-lettered (the
    producer reports only failed deliveries, so poison is found again by reading it back)."""
    return [*HOSTILE_HEADERS, (EXPECT, b"1" if dead_lettered else b"0")]


def _poison_sent(kafka_settings, topics) -> set[tuple[str, int, int]]:
    """Where every poison record that must be dead-lettered landed."""
    c = Consumer(kafka_settings, f"poison-{time.monotonic_ns()}")
    names = [
        topics.heartbeats,
        topics.work_orders,
        topics.alarms,
        topics.precompute_requests,
        topics.read_hints,
        topics.device_context,
    ]
    todo = {}
    for t in names:
        for part in range(t.partitions):
            low, high = c.watermarks(t.name, part)
            if high > low:
                todo[(t.name, part)] = high
    c.assign([TopicPartitionOffset(t, p, OFFSET_BEGINNING) for t, p in todo])
    out: set[tuple[str, int, int]] = set()
    deadline = time.monotonic() + 60
    while todo and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            tp = (m.topic(), m.partition())
            if dict((k, v) for k, v in m.headers() or []).get(EXPECT) == b"1":
                out.add((*tp, m.offset()))
            if m.offset() + 1 >= todo.get(tp, 0):
                todo.pop(tp, None)
    c.close()
    return out


def _burst(p: Producer, topics) -> None:
    now = int(time.time() * 1000) - 5_000
    d = DEVICES[0]
    inputs = {
        topics.heartbeats.name: heartbeat(d, now),
        topics.work_orders.name: work_order(d, now),
        topics.alarms.name: alarm(d, now),
        topics.precompute_requests.name: request(d, now),
        topics.read_hints.name: {"device_id": d, "hot_until_ms": now},
    }
    for topic, valid in inputs.items():
        for key, value in _poison(valid):
            p.produce(topic, key, value, _marked(True), allow_empty_key=True)
    ctx = topics.device_context.name
    for key, value in _poison({"device_id": d, "as_of_ms": now, "schema_version": 2}, True):
        # a keyed tombstone purges a device's context, and a JSON object without this spec's
        # context hash is another spec's snapshot (counted; that spec's aggregator rebuilds it):
        # both meaningful. The rest is dead-lettered.
        dead = not key or (value is not None and not _is_object(value))
        p.produce(ctx, key, value, _marked(dead), allow_empty_key=True)
    # state and presence have no dead letters: what they hold is counted and skipped
    for key, value in [
        *_poison({"device_id": d}, True),
        (b"burst-short", _forged_state()[:-1]),
    ]:
        p.produce(topics.worker_state.name, key, value, HOSTILE_HEADERS, allow_empty_key=True)
    for key, value in _poison({"device_id": d, "reads": [topics.heartbeats.name]}, True):
        p.produce(topics.presence.name, key, value, HOSTILE_HEADERS, allow_empty_key=True)
    p.flush()


def _valid(p: Producer, topics) -> None:
    t = int(time.time() * 1000) - 2_000
    for i, d in enumerate(DEVICES):
        p.produce(topics.heartbeats.name, d.encode(), orjson.dumps(heartbeat(d, t + i)))
    p.produce(topics.work_orders.name, b"burst-01", orjson.dumps(work_order("burst-01", t + 50)))
    p.produce(topics.alarms.name, b"burst-02", orjson.dumps(alarm("burst-02", t + 60)))
    p.flush()


def _inputs_after(kafka_settings, topics, start: dict[tuple[str, int], int]) -> set:
    c = Consumer(kafka_settings, f"after-{time.monotonic_ns()}")
    out = set()
    for t in (topics.heartbeats, topics.work_orders, topics.alarms):
        for part in range(t.partitions):
            _low, high = c.watermarks(t.name, part)
            out.update((t.name, part, o) for o in range(start[(t.name, part)], high))
    c.close()
    return out


def _ends(kafka_settings, topics) -> dict[tuple[str, int], int]:
    c = Consumer(kafka_settings, f"ends-{time.monotonic_ns()}")
    out = {
        (t.name, part): c.watermarks(t.name, part)[1]
        for t in (topics.heartbeats, topics.work_orders, topics.alarms)
        for part in range(t.partitions)
    }
    c.close()
    return out


def _dead_letters(kafka_settings, topics, expect: int, timeout: float = 60) -> dict:
    c = Consumer(kafka_settings, f"dlq-{time.monotonic_ns()}")
    dl = topics.dead_letters
    c.assign([TopicPartitionOffset(dl.name, p, OFFSET_BEGINNING) for p in range(dl.partitions)])
    out: dict[tuple[str, int, int], str] = {}
    deadline = time.monotonic() + timeout
    while len(out) < expect and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            info = dead_letter_info(m.headers())
            where = (
                info["source.topic"],
                int(info["source.partition"]),
                int(info["source.offset"]),
            )
            out[where] = info["reason"]
    c.close()
    return out


def _metric(port: int, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    total = 0.0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name) and (not want or all(x in line for x in want.split(","))):
                total += float(line.rsplit(" ", 1)[1])
    return total


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def test_a_poison_burst_on_every_internal_topic_stops_nothing_and_loses_nothing(
    kafka_settings, topics, unique, tmp_path
):
    group, port = unique("workers"), free_port()
    # the answer-aware policy, which reads a restored last inference (every_event skips it)
    env = {"PRECAST_METRICS__PORT": str(port), "PRECAST_POLICY__EVERY_EVENT": "false"}
    p = Producer(kafka_settings)
    a = spawn_worker(kafka_settings, topics, group, tmp_path / "a.log", **env)
    b = None
    try:
        wait_ready(port)
        _burst(p, topics)
        start = _ends(kafka_settings, topics)
        _valid(p, topics)
        wanted = _inputs_after(kafka_settings, topics, start)
        preds = read_predictions(
            kafka_settings,
            topics.predictions.name,
            topics.predictions.partitions,
            unique("reader"),
            committed_only=False,
            until=lambda ps: wanted <= set(lineage_refs(ps)),
            timeout=90,
            quiet_s=1.0,
        )
        assert wanted <= set(lineage_refs(preds)), "valid records after the burst unanswered"
        assert a.poll() is None and _ready(port), "the worker stopped or turned unready"

        expected = _poison_sent(kafka_settings, topics)
        assert len(expected) > 60
        dead = _dead_letters(kafka_settings, topics, len(expected))
        missing = expected - set(dead)
        assert not missing, f"{len(missing)} poison records not dead-lettered: {sorted(missing)}"
        assert all(dead[w] for w in expected)  # each with its reason
        assert {dead[w] for w in expected} >= {"not_json", "missing_key", "tombstone"}
        assert _metric(port, "precast_records_rejected_total", reader="worker") >= 1

        # a restart restores the poisoned worker-state topic (forged records written after the
        # worker's own, so they are the newest); both devices still predict
        assert stop(a) == 0
        for dev in (FORGED, DEVICES[3]):
            p.produce(topics.worker_state.name, dev.encode(), _forged_state())
        p.flush()
        b = spawn_worker(kafka_settings, topics, group, tmp_path / "b.log", **env)
        wait_ready(port)
        assert _metric(port, "precast_records_rejected_total", reader="worker-restore") >= 1
        start = _ends(kafka_settings, topics)
        t = int(time.time() * 1000) - 1_000
        for dev in (FORGED, DEVICES[3]):
            p.produce(topics.heartbeats.name, dev.encode(), orjson.dumps(heartbeat(dev, t)))
        p.flush()
        wanted = _inputs_after(kafka_settings, topics, start)
        preds = read_predictions(
            kafka_settings,
            topics.predictions.name,
            topics.predictions.partitions,
            unique("reader2"),
            committed_only=False,
            until=lambda ps: wanted <= set(lineage_refs(ps)),
            timeout=60,
            quiet_s=1.0,
        )
        assert wanted <= set(lineage_refs(preds)), "the forged device's heartbeat unanswered"
        for dev in (FORGED, DEVICES[3]):
            mine = [x for x in preds if x["device_id"] == dev and x["computed_at_ms"] == t]
            assert mine and all(0 <= c["score"] <= 1 for c in mine[-1]["candidates"]), dev
        assert b.poll() is None and _ready(port)

        # the operator tools' live-target guard reads the presence topic's poison
        from opsctl.toolkit.write_guard import present_readers
        from precast.kafka import Admin

        prefix = topics.heartbeats.name.removesuffix("heartbeats")
        readers = present_readers(Admin(kafka_settings), TopicSettings(prefix=prefix, partitions=3))
        assert all(r.instance.isprintable() for r in readers)
        assert stop(b) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    for log in ("a.log", "b.log"):
        text = (tmp_path / log).read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]
