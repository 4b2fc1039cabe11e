"""The audit log: appends/s from the predictions topic with a checkpoint every second, the lag
from a record to the signed checkpoint covering it at a steady rate, full verification of 1M
leaves, and proof sizes and times."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.support.harness import Context, Figure, Report, progress
from bench.support.parts.audit_proofs import PARTITIONS, big_log, leaf_value, proof_times

NAME = "audit"
DESCRIPTION = "audit log appends/s (checkpoint every 1 s), checkpoint lag, 1M-leaf verify, proofs"

# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "both cores free: the appender and the lag producer share them with the broker; "
    "checkpoint lag grows with any other load."
)


def _fill(settings, topic: str, n: int) -> None:
    from precast.kafka import Producer

    p = Producer(settings)
    step = 10_000
    for start in range(0, n, step):
        idx = range(start, min(n, start + step))
        p.produce_batch(
            topic, [f"dev-{i % 10_000:06d}".encode() for i in idx], [leaf_value(i) for i in idx]
        )
    p.flush(120)


def _appender(settings, topic: str, cp_topic: str, db: Path, on_checkpoint=None):
    from auditor.appender import Appender
    from precast.audit.checkpoint import Signer
    from precast.audit.store import LogStore
    from precast.kafka import Consumer, Producer

    tuning: dict[str, Any] = {
        "isolation.level": "read_committed",
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    }
    consumer = Consumer(settings, f"bench-audit-{db.stem}-{time.monotonic_ns()}", **tuning)
    app = Appender(
        LogStore(db),
        Signer.generate("bench.local/audit"),
        consumer,
        Producer(settings),
        topic=topic,
        checkpoint_topic=cp_topic,
        partitions=PARTITIONS,
        interval_s=1.0,
        batch=5_000,
        on_checkpoint=on_checkpoint,
    )
    app.assign()
    return app, consumer


def _throughput(settings, topic: str, cp_topic: str, n: int, tmp: Path) -> tuple[float, int, Any]:
    app, consumer = _appender(settings, topic, cp_topic, tmp / "throughput.db")
    checkpoints = 0

    def count(_now: int, _ts: list[int]) -> None:
        nonlocal checkpoints
        checkpoints += 1

    app.on_checkpoint = count
    app.step(timeout=5.0)  # first fetch (connection, metadata) outside the timed part
    started = time.perf_counter()
    while app.tree.size < n:
        app.step(timeout=0.5)
    app.checkpoint()
    elapsed = time.perf_counter() - started
    consumer.close()
    app.producer.flush(10)
    app.store.close()
    return n / elapsed, checkpoints, app.signer.verifier


def _verify_with_topic(settings, topic: str, db: Path, verifier: Any) -> tuple[float, int]:
    """`precast audit verify`'s full check, topic comparison included: seconds, records compared."""
    from opsctl.toolkit.ranges import OffsetRange
    from opsctl.toolkit.reader import RangeReader, range_consumer
    from precast.audit.store import LogStore
    from precast.audit.verify import verify_store

    def records(ranges: dict[int, tuple[int, int]]):
        c = range_consumer(settings, "bench-audit-verify")
        try:
            wanted = [OffsetRange(p, 0, end) for p, (_first, end) in sorted(ranges.items())]
            for batch in RangeReader(c, topic, wanted):
                for m in batch:
                    yield m.partition(), m.offset(), m.key(), m.value()
        finally:
            c.close()

    store = LogStore(db, readonly=True)
    started = time.perf_counter()
    report = verify_store(store, verifier, topic_records=records)
    elapsed = time.perf_counter() - started
    store.close()
    assert report.ok, report.findings[:3]
    return elapsed, report.topic_checked


def _lag(settings, topic: str, cp_topic: str, rate: int, seconds: float, tmp: Path) -> list[int]:
    """Lags (ms) of every record written at `rate`/s by a separate producer process."""
    lags: list[int] = []

    def record(now_ms: int, stamps: list[int]) -> None:
        lags.extend(now_ms - t for t in stamps)

    app, consumer = _appender(settings, topic, cp_topic, tmp / "lag.db", record)
    app.step(timeout=5.0)
    start_size = app.tree.size
    total = int(rate * seconds)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.benchmarks.bench_audit",
            "produce",
            settings.bootstrap_servers,
            topic,
            str(rate),
            str(total),
        ],
        cwd=Path(__file__).resolve().parents[2],
    )
    deadline = time.monotonic() + seconds + 60
    while app.tree.size < start_size + total and time.monotonic() < deadline:
        app.step(timeout=0.1)
    app.checkpoint()
    writer.wait(timeout=30)
    consumer.close()
    return lags


def _paced_producer(bootstrap: str, topic: str, rate: int, total: int) -> None:
    """`python -m bench.benchmarks.bench_audit produce BOOTSTRAP TOPIC RATE TOTAL`: records at a steady rate,
    in 10 ms slices, values encoded before the clock starts."""
    from precast.kafka import Producer
    from precast.settings import KafkaSettings

    values = [leaf_value(1_000_000 + i) for i in range(total)]
    keys = [f"dev-{i % 10_000:06d}".encode() for i in range(total)]
    linger: dict[str, Any] = {"linger.ms": 2}
    p = Producer(KafkaSettings(bootstrap_servers=bootstrap), **linger)
    per_slice = max(1, rate // 100)
    t0 = time.monotonic()
    for k, start in enumerate(range(0, total, per_slice)):
        wait = t0 + k / 100 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        p.produce_batch(topic, keys[start : start + per_slice], values[start : start + per_slice])
    p.flush(60)


def run(ctx: Context) -> Report:
    from precast.audit.verify import verify_store
    from precast.kafka import Admin

    settings = ctx.kafka_settings()
    admin = Admin(settings)
    admin.wait_reachable()
    n = 30_000 if ctx.quick else 300_000
    big = 100_000 if ctx.quick else 1_000_000
    rate, seconds = (10_000, 5.0) if ctx.quick else (20_000, 20.0)
    topic, lag_topic, cp_topic = ctx.unique("predictions"), ctx.unique("lag"), ctx.unique("cp")
    for name in (topic, lag_topic):
        admin.create_topic(name, PARTITIONS, {"cleanup.policy": "compact"})
    admin.create_topic(cp_topic, 1, {"cleanup.policy": "compact"})
    rows: list[list[object]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-audit-") as d:
            tmp = Path(d)
            progress(f"audit: filling {n:,} predictions")
            _fill(settings, topic, n)
            progress("audit: appending from the topic, checkpoint every second")
            per_s, checkpoints, verifier = _throughput(settings, topic, cp_topic, n, tmp)
            topic_s, compared = _verify_with_topic(settings, topic, tmp / "throughput.db", verifier)
            rows.append(
                [
                    "append from Kafka (consume, leaf, hash, SQLite, sign)",
                    f"{n:,} records",
                    round(per_s),
                    "appends/s",
                ]
            )
            progress(f"audit: {per_s:,.0f}/s; checkpoint lag at {rate:,}/s for {seconds:g}s")
            lags = sorted(_lag(settings, lag_topic, cp_topic, rate, seconds, tmp))
            p50 = lags[len(lags) // 2]
            p99 = lags[int(0.99 * (len(lags) - 1))]
            rows.append(
                [f"checkpoint lag at {rate:,} records/s", f"{len(lags):,} records", p50, "ms p50"]
            )
            rows.append(
                [f"checkpoint lag at {rate:,} records/s", f"{len(lags):,} records", p99, "ms p99"]
            )
            progress(f"audit: building a {big:,}-leaf log")
            t = time.perf_counter()
            store, signer = big_log(big, tmp, every=50_000)
            build_s = time.perf_counter() - t
            rows.append(
                [
                    "append without Kafka (leaf, hash, SQLite, sign)",
                    f"{big:,} leaves",
                    round(big / build_s),
                    "appends/s",
                ]
            )
            progress("audit: full verify")
            t = time.perf_counter()
            report = verify_store(store, signer.verifier)
            verify_s = time.perf_counter() - t
            assert report.ok and report.leaves == big, report.findings[:3]
            rows.append(
                [
                    "full verify (every leaf, every checkpoint)",
                    f"{big:,} leaves",
                    round(verify_s, 2),
                    "s",
                ]
            )
            rows.append(
                [
                    "full verify and topic comparison",
                    f"{compared:,} records",
                    round(topic_s, 2),
                    "s",
                ]
            )
            sizes = [c.size for c in store.checkpoints()]
            pr = proof_times(store, sizes, 50 if ctx.quick else 300)
            rows.append(
                [
                    "inclusion proof (build, median)",
                    f"tree of {big:,}",
                    round(pr["inclusion_ms"], 2),
                    "ms",
                ]
            )
            rows.append(
                [
                    "inclusion proof (build, p99)",
                    f"tree of {big:,}",
                    round(pr["inclusion_p99_ms"], 2),
                    "ms",
                ]
            )
            rows.append(
                [
                    "inclusion proof size (mean)",
                    f"tree of {big:,}",
                    round(pr["inclusion_bytes"]),
                    "bytes",
                ]
            )
            rows.append(
                [
                    "inclusion proof (verify, median)",
                    f"tree of {big:,}",
                    round(pr["inclusion_verify_us"], 1),
                    "us",
                ]
            )
            rows.append(
                [
                    "consistency proof (build, median)",
                    "between checkpoints",
                    round(pr["consistency_ms"], 2),
                    "ms",
                ]
            )
            rows.append(
                [
                    "consistency proof size (mean)",
                    "between checkpoints",
                    round(pr["consistency_bytes"]),
                    "bytes",
                ]
            )
            db_bytes = (tmp / "big.db").stat().st_size + sum(
                p.stat().st_size for p in tmp.glob("big.db-*")
            )
            rows.append(["store size", f"{big:,} leaves", round(db_bytes / big), "bytes/leaf"])
            store.close()
    finally:
        admin.delete_topics([topic, lag_topic, cp_topic])
    cond = f"{PARTITIONS} partitions, PredictionSets of ~{len(leaf_value(0))} B, batches of 5,000"
    return Report(
        title="Audit log (RFC 6962 Merkle log, SQLite WAL, Ed25519 checkpoints every second)",
        columns=["what", "size", "value", "unit"],
        rows=rows,
        figures=[
            Figure(
                "audit_appends_per_s",
                round(per_s),
                "appends/s",
                "goal >= 50,000; Tessera POSIX ~2,900/s on 12 cores",
                f"{n:,} records consumed from Kafka, {cond}, checkpoint every 1 s ({checkpoints} signed)",
            ),
            Figure(
                "audit_checkpoint_lag_p99_ms",
                p99,
                "ms",
                "goal <= 1,500",
                f"record CreateTime to its signed checkpoint, {rate:,}/s for {seconds:g}s "
                f"from a separate producer process; p50 {p50} ms",
            ),
            Figure(
                "audit_verify_1m_s",
                round(verify_s, 2),
                "s",
                "goal <= 10",
                f"{big:,} leaves, {len(sizes)} signed checkpoints: every leaf hash, order, "
                "every root; topic comparison not included",
            ),
            Figure(
                "audit_verify_with_topic_per_s",
                round(compared / topic_s),
                "leaves/s",
                "-",
                f"`precast audit verify` with the topic comparison: {compared:,} leaves, each "
                "re-derived from its Kafka record",
            ),
            Figure(
                "audit_inclusion_proof_bytes",
                round(pr["inclusion_bytes"]),
                "bytes",
                "-",
                f"tree of {big:,}: ~log2(n) hashes of 32 bytes",
            ),
            Figure(
                "audit_inclusion_proof_ms",
                round(pr["inclusion_ms"], 2),
                "ms",
                "-",
                f"build from the SQLite store (stored levels every 8), median of random leaves, tree of {big:,}",
            ),
            Figure(
                "audit_consistency_proof_bytes",
                round(pr["consistency_bytes"]),
                "bytes",
                "-",
                "between two random stored checkpoints",
            ),
            Figure(
                "audit_consistency_proof_ms",
                round(pr["consistency_ms"], 2),
                "ms",
                "-",
                "build from the store, median",
            ),
        ],
        notes=[
            "One process, one thread appends: decode the fields the leaf names (msgspec), canonical leaf, "
            "SHA-256 in batches, the frontier in memory, one SQLite transaction per batch (leaves, "
            "stored inner nodes, offsets, frontier); each checkpoint is stored with a full WAL fsync "
            "before it is mirrored to the checkpoints topic.",
            "The lag producer runs in its own process on the same 2 shared cores as the broker and the appender.",
        ],
    )


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "produce":
    _paced_producer(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
