"""The read API's gate process (consumer_api.materialize.gate) on the real broker: it passes on
valid answers and leases, takes every poison record off the replica (rejected, counted in the
replica's own metrics, dead-lettered once), runs at the lowest priority in a session of its
own, comes back after it is killed, and ends when its replica does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import orjson
from prometheus_client import REGISTRY

from consumer_api.materialize.gate import GateConfig
from consumer_api.materialize.gated import GateSource
from consumer_api.materialize.materializer import Materializer
from consumer_api.materialize.source import replica_group
from precast.kafka import Producer
from precast.serving import MemoryStore, RedisStore
from tests.integration.api_helpers import wait_for
from tests.integration.ops_support import read_all
from tests.integration.test_readers_poison_burst import _prediction, poison

PARTITIONS = 3
GATE_NICE = 15  # any but the test process's own


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _rejected() -> float:
    return sum(
        s.value
        for m in REGISTRY.collect()
        if m.name == "precast_records_rejected"
        for s in m.samples
        if s.name.endswith("_total") and s.labels.get("reader") == "api-materializer"
    )


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _nice(pid: int) -> int:
    return int(_stat(pid)[16])


def _gate(kafka_settings, predictions: str, dead: str | None) -> GateSource:
    conf = GateConfig(
        kafka_settings, predictions, replica_group("gate-test"), dead, 500, 0.05, nice=GATE_NICE
    )
    return GateSource(conf, PARTITIONS)


def _write_poison(producer: Producer, predictions: str, now: int) -> int:
    bad = poison(now)
    for i, (key, value, headers, _) in enumerate(bad):
        producer.produce(
            predictions, key, value, headers, partition=i % PARTITIONS, allow_empty_key=True
        )
    for i in range(3):  # tombstones: counted, never letters
        producer.produce(predictions, b"dev-t%d" % i, None, partition=i % PARTITIONS)
    producer.flush()
    return len(bad)


def _letters(kafka_settings, dead: str) -> int:
    return sum(len(v) for v in read_all(kafka_settings, dead).values())


def test_the_gate_passes_answers_on_and_takes_the_poison(
    kafka_settings, topic_factory, redis_settings
):
    predictions = topic_factory("predictions", PARTITIONS)
    dead = topic_factory("dead", 1)
    now = int(time.time() * 1000)
    producer = Producer(kafka_settings)
    # A backlog with poison: the replica catches up in its own process (nothing is served yet)
    n_bad = _write_poison(producer, predictions, now)

    rejected_before = _rejected()
    view, shared = MemoryStore(), RedisStore.from_settings(redis_settings)
    gate = _gate(kafka_settings, predictions, dead)
    mat = Materializer(
        kafka_settings,
        predictions,
        PARTITIONS,
        view=view,
        shared=shared,
        producer=Producer(kafka_settings),
        dead_letter_topic=dead,
        wait_s=0.05,
        live_source=gate,
    )
    mat.start()
    try:
        wait_for(lambda: mat.ready and mat._source is gate, 60, 0.1, "caught up, handed over")
        assert mat.guard.rejected == n_bad  # the backlog's poison, in the replica's process
        pid = gate.pid
        assert pid is not None
        wait_for(lambda: _nice(pid) == GATE_NICE, 10, 0.05, "the gate below the reads")
        assert os.getsid(pid) != os.getsid(0)  # a scheduling group of its own

        # Live poison, then valid answers: the gate takes the one, passes on the others.
        tombstones_before = _count("precast_api_materialized_total", result="tombstone")
        _write_poison(producer, predictions, now)
        valid = [f"dev-{i:02d}" for i in range(20)]
        for d in valid:
            producer.produce(predictions, d.encode(), orjson.dumps(_prediction(d, now)))
        producer.flush()
        wait_for(lambda: all(view.get(d) is not None for d in valid), 60, 0.1, "valid answers")
        wait_for(lambda: all(shared.get(d) is not None for d in valid), 60, 0.1, "in Redis too")
        wait_for(lambda: _rejected() - rejected_before == 2 * n_bad, 30, 0.1, "relayed counts")
        wait_for(lambda: mat.lag == 0, 30, 0.1, "past the poison at every partition's end")
        assert mat.guard.rejected == n_bad  # the replica saw none of the live burst
        assert view.get("dev-p") is None and shared.get("dev-p") is None
        assert _count("precast_api_materialized_total", result="tombstone") - tombstones_before == 3
        wait_for(lambda: _letters(kafka_settings, dead) == 2 * n_bad, 30, 0.2, "every letter")

        # Redis loses its data: the replica replays the topic through the gate; the poison is
        # counted again (the metric counts reads), never dead-lettered again.
        shared.clear()
        wait_for(lambda: _rejected() - rejected_before == 4 * n_bad, 60, 0.1, "the replay")
        wait_for(lambda: all(shared.get(d) is not None for d in valid), 60, 0.1, "Redis replayed")

        # A killed gate comes back, counted, from where the view stands: no letter twice.
        os.kill(pid, signal.SIGKILL)
        later = [f"dev-later-{i}" for i in range(10)]
        for d in later:
            producer.produce(predictions, d.encode(), orjson.dumps(_prediction(d, now + 5)))
        producer.flush()
        wait_for(lambda: all(view.get(d) is not None for d in later), 60, 0.1, "after the kill")
        assert mat.supervised.restarts == 1 and mat.error is None
        assert gate.pid not in (None, pid)
        wait_for(lambda: mat.ready, 30, 0.1, "ready again")
        assert _rejected() - rejected_before == 4 * n_bad
        assert _letters(kafka_settings, dead) == 2 * n_bad
    finally:
        mat.stop()
        shared.clear()
    assert gate.pid is None  # stopped with the materializer


WATCHED = """
import sys, time
from consumer_api.materialize.gate import GateConfig
from consumer_api.materialize.gated import GateSource
from precast.settings import KafkaSettings
conf = GateConfig(KafkaSettings(bootstrap_servers=sys.argv[1]), sys.argv[2], "gate-orphan", None, 10, 0.05)
gate = GateSource(conf, 3)
gate.assign({0: -2, 1: -2, 2: -2}, {})
print(gate.pid, flush=True)
time.sleep(600)
"""


def test_the_gate_ends_when_its_replica_is_killed(kafka_settings, topic_factory):
    predictions = topic_factory("predictions", PARTITIONS)
    parent = subprocess.Popen(
        [sys.executable, "-c", WATCHED, kafka_settings.bootstrap_servers, predictions],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        gate_pid = int(parent.stdout.readline())
        time.sleep(1.0)
        assert os.path.exists(f"/proc/{gate_pid}")
        parent.kill()  # no chance to stop its gate
        parent.wait(10)
        wait_for(lambda: not _running(gate_pid), 15, 0.1, "the orphaned gate to end")
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def _running(pid: int) -> bool:
    try:
        state = _stat(pid)[0]
    except FileNotFoundError:
        return False
    return state != "Z"
