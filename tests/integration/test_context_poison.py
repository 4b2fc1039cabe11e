"""Issue 36: the faust context aggregator under a burst of hostile records on both streams it
reads (nesting past any recursion limit, not JSON, invalid UTF-8, non-finite and huge numbers,
wrong types, null and empty keys, tombstones, headers with None values and any bytes): it stays
ready, dead-letters each one with its reason, and folds the valid events written after them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import orjson
import pytest

from opsctl.stack.process import free_port
from precast.deadletter import dead_letter_info
from precast.fleet import load_fleet, snapshot
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from tests.integration.test_poison_burst import EXPECT, _marked, _poison
from tests.integration.worker_support import ROOT, wait_ready
from tests.worker_events import alarm, work_order

MODEL = load_fleet().context


def _read(kafka_settings, topic: str, until, timeout: float = 60) -> list:
    c = Consumer(kafka_settings, f"read-{time.monotonic_ns()}")
    c.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(3)])
    out: list = []
    deadline = time.monotonic() + timeout
    while not until(out) and time.monotonic() < deadline:
        out += c.consume(1000, 0.5)
    c.close()
    return out


# slow: starts a faust app (~15 s on two cores)
@pytest.mark.slow
def test_the_context_aggregator_survives_a_poison_burst(
    kafka_settings, topics, unique, tmp_path, admin
):
    app_id, port = unique("ctx"), free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": "3",
        "PRECAST_CONTEXT__APP_ID": app_id,
        "PRECAST_CONTEXT__DATA_DIR": str(tmp_path / "faust"),
        "PRECAST_METRICS__PORT": str(port),
    }
    log = tmp_path / "agg.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.context.aggregator"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_ready(port, timeout=90)
        p = Producer(kafka_settings)
        t = int(time.time() * 1000) - 10_000
        sent = 0
        for topic, valid in (
            (topics.work_orders.name, work_order("ctx-poison", t)),
            (topics.alarms.name, alarm("ctx-poison", t)),
        ):
            for key, value in _poison(valid):
                p.produce(topic, key, value, _marked(True), allow_empty_key=True)
                sent += 1
        valid_devices = [f"ctx-ok-{i}" for i in range(6)]
        for i, d in enumerate(valid_devices):
            p.produce(
                topics.work_orders.name, d.encode(), orjson.dumps(work_order(d, t + i, f"w{i}"))
            )
        p.flush()

        def folded(msgs: list) -> bool:
            return {m.key().decode() for m in msgs} >= set(valid_devices)

        snaps = _read(kafka_settings, topics.device_context.name, folded)
        assert folded(snaps), "valid events after the burst not folded"
        for m in snaps:
            if m.key().decode() in valid_devices:
                assert snapshot.from_json(MODEL, m.value()).device_id == m.key().decode()

        dead = _read(kafka_settings, topics.dead_letters.name, lambda ms: len(ms) >= sent)
        infos = [dead_letter_info(m.headers()) for m in dead]
        poison = [
            i for m, i in zip(dead, infos, strict=True) if (EXPECT, b"1") in (m.headers() or [])
        ]
        assert len(poison) == sent, f"{len(poison)} of {sent} poison records dead-lettered"
        assert all(i["component"] == "context" and i["reason"] for i in poison)
        assert proc.poll() is None
        wait_ready(port, timeout=5)
        proc.terminate()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        admin.delete_topics([n for n in admin.topic_partitions() if app_id in n])
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
