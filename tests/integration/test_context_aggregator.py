"""The faust context aggregator against the Kafka 4 broker, with lz4 input from our producers:
folds work orders and alarms into per-device context, survives kill -9 (its table comes back
from the changelog, redelivered events are idempotent) and dead-letters bad records."""

import os
import random
import subprocess
import sys
import threading
import time

import orjson
import pytest

from opsctl.stack.process import free_port
from precast.deadletter import dead_letter_info
from precast.fleet import load_fleet, snapshot
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from tests.integration.worker_support import ROOT, wait_ready
from tests.worker_events import alarm, work_order

MODEL = load_fleet().context


def events(n, devices=40, t0=1_800_000_000_000):
    rng = random.Random(5)
    out = []
    for i in range(n):
        d, t = f"dev-{rng.randrange(devices):03d}", t0 + i * 1000
        if rng.random() < 0.5:
            out.append(
                (
                    "work_orders",
                    work_order(
                        d,
                        t,
                        f"w{rng.randrange(200)}",
                        rng.choice(["opened", "closed"]),
                        rng.choice(["low", "high"]),
                    ),
                )
            )
        else:
            out.append(
                ("alarms", alarm(d, t, f"a{i}", rng.choice(["critical", "warning", "info"])))
            )
    return out


def expected_context(evs):
    ctx = {}
    for role, e in evs:
        c = ctx.setdefault(e["device_id"], MODEL.new(e["device_id"]))
        MODEL.apply(c, role, e)
    return ctx


def essence(contexts, at_ms):
    """What the features see (snapshots are published on change only, so `as_of_ms` and
    already-expired alarms may lag behind the reducer run over every event)."""
    return {d: (c.open, c.since, MODEL.values(c, at_ms)) for d, c in contexts.items()}


def latest_snapshots(kafka_settings, topic, group):
    c = Consumer(kafka_settings, group)
    highs = {p: c.watermarks(topic, p)[1] for p in range(3)}
    c.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(3)])
    out, pos, deadline = {}, {}, time.monotonic() + 20
    while any(pos.get(p, 0) < h for p, h in highs.items()) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.2):
            out[m.key().decode()] = snapshot.from_json(MODEL, m.value())
            pos[m.partition()] = m.offset() + 1
    c.close()
    return out


@pytest.fixture
def aggregator(kafka_settings, topics, unique, tmp_path, admin):
    app_id = unique("ctx")
    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": "3",
        "PRECAST_CONTEXT__APP_ID": app_id,
        "PRECAST_CONTEXT__DATA_DIR": str(tmp_path / "faust"),
        "PRECAST_METRICS__PORT": str(port),
    }
    procs = []

    def start():
        with (tmp_path / f"agg{len(procs)}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "workers.context.aggregator"],
                    env=env,
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        return procs[-1], port

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    admin.delete_topics([n for n in admin.topic_partitions() if app_id in n])


# slow: a fault scenario of ~20 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
def test_context_aggregation_survives_kill_9_and_matches_the_reducer(
    kafka_settings, topics, unique, aggregator
):
    evs = events(1200)
    p = Producer(kafka_settings)  # lz4, like every precast producer
    name = {"work_orders": topics.work_orders.name, "alarms": topics.alarms.name}

    def send(batch, rate=None):
        for role, e in batch:
            p.produce(name[role], e["device_id"].encode(), orjson.dumps(e))
            if rate:
                time.sleep(1 / rate)
        p.flush()

    send(evs[:600])
    p.produce(topics.alarms.name, b"dev-000", b"\x00garbage")
    p.flush()
    t0 = time.monotonic()
    proc, port = aggregator()
    wait_ready(port, timeout=60)
    ready_s = time.monotonic() - t0
    feeder = threading.Thread(target=send, args=(evs[600:], 300))
    feeder.start()
    time.sleep(1.0)
    proc.kill()  # kill -9 mid-stream
    proc.wait()
    feeder.join()
    t1 = time.monotonic()
    proc, port = aggregator()
    wait_ready(port, timeout=60)
    recovered_s = time.monotonic() - t1
    end = evs[-1][1]["event_time_ms"]
    want = essence(expected_context(evs), end)
    deadline, got = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        got = essence(
            latest_snapshots(kafka_settings, topics.device_context.name, unique("r")), end
        )
        if got == want:
            break
        time.sleep(1.0)
    done_s = time.monotonic() - t1
    assert got == want
    proc.terminate()
    assert proc.wait(30) == 0
    c = Consumer(kafka_settings, unique("dl"))
    c.assign(
        [TopicPartitionOffset(topics.dead_letters.name, q, OFFSET_BEGINNING) for q in range(3)]
    )
    dead, deadline = [], time.monotonic() + 10
    while not dead and time.monotonic() < deadline:
        dead = c.consume(100, 0.5)
    c.close()
    info = dead_letter_info(dead[0].headers())
    assert (info["reason"], info["component"], dead[0].value()) == (
        "not_json",
        "context",
        b"\x00garbage",
    )
    print(
        f"\nfaust aggregator: ready {ready_s:.1f}s after start, ready again {recovered_s:.1f}s after kill -9, "
        f"context complete {done_s:.1f}s after restart ({len(want)} devices, {len(evs)} events)"
    )
