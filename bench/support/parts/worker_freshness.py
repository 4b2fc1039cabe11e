"""`python -m bench worker`, freshness at 10k events/s: a worker process on its own, the fleet load
from a child process, and a read_committed reader timing every input named in a prediction's
lineage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import orjson

from bench.support.harness import ROOT
from bench.support.loads.fleet_load import LoadProcess
from schemas.leases import is_lease_key

WARMUP_S = 3.0  # seconds of load before inputs count


def freshness(ctx, admin, topics, exactly_once: bool, seconds: float) -> tuple[np.ndarray, int]:
    """ms from an event's produce call to a read_committed reader holding its prediction,
    for every input in a prediction's lineage, with a worker process running on its own over
    `topics` (deleted at the end)."""
    from opsctl.stack.process import free_port
    from precast.kafka import OFFSET_END, Consumer, TopicPartitionOffset

    partitions = topics.heartbeats.partitions

    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": ctx.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(partitions),
        "PRECAST_WORKER__GROUP_ID": ctx.unique("fr"),
        "PRECAST_MODEL__PROVIDER": "cpu",
        "PRECAST_METRICS__PORT": str(port),
        "PRECAST_LOG_LEVEL": "WARNING",
        "PRECAST_WORKER__EXACTLY_ONCE": "true" if exactly_once else "false",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.precompute.cli"],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    committed_only: dict[str, Any] = {"isolation.level": "read_committed"}
    reader = Consumer(ctx.kafka_settings(), ctx.unique("rd"), **committed_only)
    reader.assign(
        [TopicPartitionOffset(topics.predictions.name, p, OFFSET_END) for p in range(partitions)]
    )
    try:
        wait_ready(port)
        stop, lat = threading.Event(), []
        ts: dict[tuple[int, int], int] = {}

        def read() -> None:
            while not stop.is_set():
                # consume_available: a full-batch wait would add up to 50 ms to the figure
                for m in reader.consume_available(5_000, 0.05):
                    now = time.time() * 1000
                    if is_lease_key(m.key()):
                        continue  # a validity lease names no input
                    for r in orjson.loads(m.value() or b"{}")["lineage"]:
                        lat.append((r["partition"], r["offset"], now))

        t = threading.Thread(target=read, daemon=True)
        t.start()
        load = LoadProcess(
            ctx.kafka_settings(), topics.heartbeats.name, rate=10_000, seconds=seconds + WARMUP_S
        )
        load.start()
        # The first seconds after start-up (group join, first fetches, the producer's PID) are
        # not the steady state the figure is about: inputs produced then are left out.
        measured_from = time.time() * 1000 + WARMUP_S * 1000
        sent = load.join(seconds + WARMUP_S + 60)
        time.sleep(1.5)
        stop.set()
        t.join()
        # produce time of each input = its record's CreateTime, set by our producer at produce()
        c = Consumer(ctx.kafka_settings(), ctx.unique("ts"))
        c.assign([TopicPartitionOffset(topics.heartbeats.name, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(ts) < sent and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.2):
                ts[(m.partition(), m.offset())] = m.timestamp()[1]
        c.close()
        ms = np.array(
            [now - ts[(p, o)] for p, o, now in lat if (p, o) in ts and ts[(p, o)] >= measured_from]
        )
        return ms, sent
    finally:
        reader.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        admin.delete_topics([t.name for t in topics])


def wait_ready(port: int, timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("worker did not become ready")
