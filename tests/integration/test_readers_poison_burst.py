"""A burst of poison records on a fresh predictions topic while the read API's materializer (with
the shared Redis store) and the auditor's appender read it, then valid records after them, on
the running stack (issue 36, deliverable 1): both readers stay ready, the valid records are
served and appended, and the poison counted (and dead-lettered) equals the poison sent."""

from __future__ import annotations

import json
import threading
import time

import orjson

from auditor.appender import Appender
from consumer_api.materialize.materializer import Materializer
from precast.audit.checkpoint import load_or_create_signer
from precast.audit.store import LogStore
from precast.kafka import Consumer, Producer
from precast.serving import MemoryStore, RedisStore
from tests.integration.api_helpers import wait_for
from tests.integration.ops_support import read_all

PARTITIONS = 3


def _prediction(device: str, now: int, **extra: object) -> dict[str, object]:
    return {
        "schema_version": 1,
        "device_id": device,
        "candidates": [{"strategy": "remote_restart", "score": 0.7}],
        "model_version": "1.0.0",
        "computed_at_ms": now - 1_000,
        "valid_until_ms": now + 600_000,
        "produced_at_ms": now - 900,
        "trigger": "heartbeat",
        **extra,
    }


Poison = tuple[bytes | None, bytes, list[tuple[str, bytes | None]] | None, bool]


def poison(now: int) -> list[Poison]:
    """(key, value, headers, the auditor cannot read it either) of records the materializer
    must reject, each once. The auditor commits to every record: it reads a prediction whose
    key or model version serving refuses as a prediction leaf, the rest as invalid leaves."""
    valid = orjson.dumps(_prediction("dev-p", now))
    deep = b"[" * 5000 + b"]" * 5000
    big_int = json.dumps(_prediction("dev-p", now, computed_at_ms=2**70)).encode()
    odd = [("traceparent", b"\xff\x00"), ("x", None), ("\x1b[2J", b"\x00" * 64)]
    return [
        (b"dev-p", valid[:-1] + b',"zz":' + deep + b"}", None, True),  # the record
        (b"dev-p", b'{"x":' * 5000 + b"1" + b"}" * 5000, None, True),
        (b"dev-p", deep, odd, True),
        (b"dev-p", b"not json at all", None, True),
        (b"dev-p", b"\xff\xfe\xfd", None, True),
        (b"dev-p", big_int, None, True),
        (b"dev-p", valid.replace(b'"computed_at_ms":', b'"computed_at_ms":1e400,"x":'), None, True),
        (b"dev-p", valid.replace(b"0.7", b"NaN"), None, True),
        (b"dev-p", valid.replace(b'"dev-p"', b"17"), None, True),
        (b"dev-p", b'{"a":"' + b"b" * 900_000 + b'"}', None, True),
        (None, b"[" + deep + b"]", None, True),
        (b"#lease:1", b'{"kind":"validity_lease","partition":[' + deep + b"]}", None, True),
        (b"#lease:1", b'{"kind":"validity_lease","partition":2}', None, True),
        (b"dev-p", valid.replace(b'"1.0.0"', b'"1.0\\r\\nX-Evil: 1"'), None, False),
        (b"dev-p", valid.replace(b'"1.0.0"', b'"\\u00ff\\u0000"'), None, False),
        (b"\xff\x00foreign", valid, odd, False),  # the key is not the device
    ]


def test_a_poison_burst_stops_neither_reader(
    kafka_settings, topic_factory, redis_settings, tmp_path
):
    predictions = topic_factory("predictions", PARTITIONS)
    dead = topic_factory("dead", 1)
    now = int(time.time() * 1000)
    bad = poison(now)
    tombstones = 3
    valid = [f"dev-{i:02d}" for i in range(30)]

    producer = Producer(kafka_settings)
    for i, (key, value, headers, _) in enumerate(bad):
        producer.produce(
            predictions, key, value, headers, partition=i % PARTITIONS, allow_empty_key=True
        )
    for i in range(tombstones):
        producer.produce(predictions, b"dev-t%d" % i, None, partition=i % PARTITIONS)
    producer.flush()

    view, shared = MemoryStore(), RedisStore.from_settings(redis_settings)
    mat = Materializer(
        kafka_settings,
        predictions,
        PARTITIONS,
        view=view,
        shared=shared,
        producer=Producer(kafka_settings),
        dead_letter_topic=dead,
        wait_s=0.05,
    )
    signer = load_or_create_signer(tmp_path / "key", "test.local/poison")
    app = Appender(
        LogStore(tmp_path / "log.db"),
        signer,
        Consumer(kafka_settings, f"audit-{predictions}", **{"isolation.level": "read_committed"}),
        None,
        topic=predictions,
        checkpoint_topic=None,
        partitions=PARTITIONS,
        interval_s=0.2,
    )
    runner = threading.Thread(target=app.run, daemon=True)
    mat.start()
    runner.start()
    try:
        wait_for(lambda: mat.ready, 60, 0.1, "the materializer ready after the burst")
        # valid records after the burst
        for d in valid:
            producer.produce(predictions, d.encode(), orjson.dumps(_prediction(d, now)))
        producer.flush()
        wait_for(lambda: all(view.get(d) is not None for d in valid), 60, 0.1, "every valid answer")
        wait_for(
            lambda: all(shared.get(d) is not None for d in valid), 60, 0.1, "valid answers in Redis"
        )
        total = len(bad) + tombstones + len(valid)
        wait_for(lambda: app.tree.size == total, 60, 0.1, "a leaf for every record")

        assert mat.ready and mat.error is None and mat.supervised.restarts == 0
        assert app.error is None and app.supervised.restarts == 0 and runner.is_alive()
        assert mat.guard.rejected == len(bad)  # every poison record counted once, nothing else
        # tombstones are leaves of their own kind, not rejections
        assert app.guard.rejected == sum(1 for *_, unreadable in bad if unreadable)
        assert view.get("dev-p") is None and shared.get("dev-p") is None
        dead_letters = sum(len(v) for v in read_all(kafka_settings, dead).values())
        assert dead_letters == len(bad)
    finally:
        mat.stop()
        app.stop()
        runner.join(30)
        shared.clear()
