"""Helpers for the SRE tool tests: run the real `precast` CLI, read topics back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from opsctl.toolkit.ranges import OffsetRange
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.kafka import Admin, Consumer, Producer
from precast.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]


def cli_env(kafka: KafkaSettings, state_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "PRECAST_OPS__STATE_DIR": str(state_dir),
        **extra,
    }


def precast(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opsctl.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "opsctl.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def read_all(kafka: KafkaSettings, topic: str) -> dict[int, list[tuple]]:
    """Every record of a topic as (offset, key, value, headers, timestamp), per partition."""
    admin = Admin(kafka)
    n = admin.topic_partitions()[topic]
    ends = admin.end_offsets([(topic, p) for p in range(n)])
    c = range_consumer(kafka, "test-read")
    out: dict[int, list[tuple]] = {p: [] for p in range(n)}
    try:
        for msgs in RangeReader(c, topic, [OffsetRange(p, 0, ends[(topic, p)]) for p in range(n)]):
            for m in msgs:
                out[m.partition()].append(
                    (m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()[1])
                )
    finally:
        c.close()
    return out


def content(records: list[tuple]) -> list[tuple]:
    """(key, value, headers) in order: what a replay must reproduce."""
    return [(k, v, h) for _o, k, v, h, _t in records]


def produce(kafka: KafkaSettings, topic: str, records: list[tuple]) -> None:
    """records: (partition, key, value, headers, timestamp_ms)."""
    p = Producer(kafka)
    for part, key, value, headers, ts in records:
        p.copy(topic, part, key, value, headers, ts)
    p.flush()


def end_total(kafka: KafkaSettings, topic: str) -> int:
    admin = Admin(kafka)
    n = admin.topic_partitions()[topic]
    return sum(admin.end_offsets([(topic, p) for p in range(n)]).values())


__all__ = ["Consumer", "cli_env", "content", "end_total", "precast", "produce", "read_all", "spawn"]


def fresh_view(kafka: KafkaSettings, topic: str, partitions: int):
    """What a fresh API replica serves: its materializer's view built from the predictions topic."""
    import time
    import uuid

    from consumer_api.materialize.materializer import Materializer
    from precast.serving import MemoryStore

    view = MemoryStore(grace_ms=30_000)
    mat = Materializer(
        kafka, topic, partitions, view=view, group_prefix=f"test-{uuid.uuid4().hex[:6]}"
    )
    mat.start()
    try:
        deadline = time.monotonic() + 30
        while not mat.ready and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mat.ready
        return view
    finally:
        mat.stop()
