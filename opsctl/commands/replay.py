"""`precast replay`: copy a time or offset range of a topic into a target topic (this cluster
or another), keeping keys, headers and order per partition; filters, rate limits, dry run,
and a checkpoint that lets a rerun of the same command continue without duplicates."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit import copier
from opsctl.toolkit.filters import RecordFilter
from opsctl.toolkit.job_checkpoint import Checkpoint, fingerprint, load_for
from opsctl.toolkit.ranges import TimeRange, add_range_args, format_time, range_inputs
from opsctl.toolkit.reader import RangeReader, range_consumer, resolve
from opsctl.toolkit.replay_pacing import ReplaySchedule
from opsctl.toolkit.write_guard import partitions_of, refuse_live_target
from precast.errors import ConfigError
from precast.hygiene import printable
from precast.kafka import Admin, KafkaMessage
from precast.settings import KafkaSettings
from precast.telemetry.progress import bar, table
from schemas.partitioning import partition_for
from schemas.spec import load_spec


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="topic to read")
    parser.add_argument("target", nargs="?", help="topic to write (not needed with --dry-run)")
    add_range_args(parser)
    parser.add_argument(
        "--device", action="append", help="only these device IDs (repeat or comma-separate)"
    )
    parser.add_argument(
        "--event-type", action="append", help="only these event kinds: heartbeat, work_order, alarm"
    )
    parser.add_argument(
        "--schema-version", action="append", help="only these payload schema versions"
    )
    parser.add_argument("--rate", type=float, help="at most this many records per second")
    parser.add_argument(
        "--speed", type=float, help="original timing scaled: 1 = as recorded, 10 = ten times faster"
    )
    parser.add_argument(
        "--keep-timestamps", action="store_true", help="write the records' original timestamps"
    )
    parser.add_argument(
        "--target-bootstrap",
        help="brokers of the target cluster (default: "
        "PRECAST_OPS__TARGET_KAFKA, else the source cluster)",
    )
    parser.add_argument(
        "--create-target",
        action="store_true",
        help="create the target topic with the source's partition count when it is missing",
    )
    parser.add_argument(
        "--allow-live-target",
        action="store_true",
        help="write even into a topic that live consumers read (a pipeline input)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be copied per partition; write nothing",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint file (default: one per distinct command under PRECAST_OPS__STATE_DIR)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="ignore an existing checkpoint and start over"
    )
    parser.add_argument("--no-progress", action="store_true")


def target_settings(settings: StackCliSettings, bootstrap: str | None) -> KafkaSettings:
    target = settings.ops.target_kafka or settings.kafka
    return target.model_copy(update={"bootstrap_servers": bootstrap}) if bootstrap else target


def make_route(
    target: str, same_layout: bool, target_parts: int, flt: RecordFilter
) -> copier.Route:
    """The per-record function: keep the source partition when both topics have the same
    partition count (exact order per partition), else place by key like the Java client."""
    if flt.is_open and same_layout:

        def route_fast(m: KafkaMessage) -> copier.Out:
            return (target, m.partition(), m.key(), m.value(), m.headers(), m.timestamp()[1])

        return route_fast
    cache: dict[bytes, int] = {}

    def place(key: bytes | None, p: int) -> int:
        if not key:
            return p % target_parts  # keyless records keep a deterministic place
        q = cache.get(key)
        if q is None:
            if len(cache) > 200_000:
                cache.clear()
            q = cache[key] = partition_for(key, target_parts)
        return q

    def route(m: KafkaMessage) -> copier.Out | None:
        key, value, ts = m.key(), m.value(), m.timestamp()[1]
        if not flt.matches(key, value, ts):
            return None
        p = m.partition()
        return (target, p if same_layout else place(key, p), key, value, m.headers(), ts)

    return route


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    tr, spec = range_inputs(args)
    flt = RecordFilter.from_args(
        args.device, args.event_type, args.schema_version, tr, load_spec(settings.fleet.spec)
    )
    pacer = ReplaySchedule(rate=args.rate, speed=args.speed)
    if not args.dry_run and not args.target:
        raise ConfigError("a target topic is needed (or --dry-run)")
    src_admin = Admin(settings.kafka)
    src_admin.wait_reachable()
    src_parts = partitions_of(src_admin, args.source, settings.kafka.bootstrap_servers)
    if args.dry_run and not args.target:
        return _dry_run(args, settings, src_parts, tr, spec, flt)
    target = target_settings(settings, args.target_bootstrap)
    tgt_admin = Admin(target) if target is not settings.kafka else src_admin
    tgt_admin.wait_reachable()
    if args.target not in tgt_admin.topic_partitions() and (not args.create_target or args.dry_run):
        raise ConfigError(
            f"unknown target topic {args.target!r} on {target.bootstrap_servers} "
            f"(create it, or pass --create-target)"
        )
    if not args.allow_live_target:
        refuse_live_target(tgt_admin, settings.topics, args.target)
    if args.dry_run:
        return _dry_run(args, settings, src_parts, tr, spec, flt)
    if args.target not in tgt_admin.topic_partitions():
        tgt_admin.create_topic(args.target, src_parts)
        print(f"created {args.target} with {src_parts} partitions")
    tgt_parts = partitions_of(tgt_admin, args.target, target.bootstrap_servers)

    params = {
        "cmd": "replay",
        "source": [settings.kafka.bootstrap_servers, args.source],
        "target": [target.bootstrap_servers, args.target],
        "from": args.time_from,
        "to": args.time_to,
        "offsets": args.offsets,
        "filter": flt.describe() if not tr else {**flt.describe(), "time_range": None},
        "keep_ts": args.keep_timestamps,
    }
    fp = fingerprint(params)
    path = args.checkpoint or settings.ops.state_dir / f"replay-{fp[:16]}.json"
    cp = load_for(path, fp, args.fresh)
    if cp is not None and cp.complete:
        print(
            f"nothing to do: this replay completed ({cp.written:,} records written); "
            f"checkpoint {path}; pass --fresh to run it again"
        )
        return 0
    resumed = cp is not None
    if cp is not None and cp.window:
        # The same records must pass the filter as in the first run, whatever "now" is.
        flt = dataclasses.replace(flt, time_range=TimeRange(*cp.window))
    if cp is None:
        ranges = resolve(settings.kafka, args.source, src_parts, tr, spec)
        cp = Checkpoint(
            fingerprint=fp,
            run_id=fp[:12],
            source_topic=args.source,
            ranges={r.partition: [r.start, r.end] for r in ranges},
            next={r.partition: r.start for r in ranges},
            scan_from={},
            window=[tr.start_ms, tr.end_ms] if tr else None,
        )
    else:
        print(
            f"resuming from {path}: {cp.written:,} written so far, {cp.remaining():,} offsets to go"
        )
    same = tgt_parts == src_parts
    job = copier.CopyJob(
        settings.kafka,
        args.source,
        target,
        {args.target: tgt_parts},
        make_route(args.target, same, tgt_parts, flt),
        args.keep_timestamps,
        pacer,
        settings.ops,
        path,
        same_partition_topic=args.target if same and flt.is_open else None,
        progress=not args.no_progress,
    )
    stats = copier.run(job, cp, resumed=resumed)
    _summary(args, cp, stats, tgt_parts == src_parts, path)
    return 0


def _dry_run(
    args: argparse.Namespace,
    settings: StackCliSettings,
    parts: int,
    tr: TimeRange | None,
    spec: Any,
    flt: RecordFilter,
) -> int:
    ranges = resolve(settings.kafka, args.source, parts, tr, spec)
    counts = {r.partition: [0, 0] for r in ranges}
    c = range_consumer(settings.kafka, "dry-run")
    progress = bar(sum(r.size for r in ranges), "dry run", enabled=not args.no_progress)
    try:
        for msgs in RangeReader(c, args.source, ranges):
            for m in msgs:
                n = counts[m.partition()]
                n[0] += 1
                if flt.matches(m.key(), m.value(), m.timestamp()[1]):
                    n[1] += 1
            progress.update(len(msgs))
    finally:
        progress.close()
        c.close()
    rows = [
        [r.partition, f"{r.start}-{r.end}", counts[r.partition][0], counts[r.partition][1]]
        for r in ranges
    ]
    rows.append(
        ["total", "", sum(v[0] for v in counts.values()), sum(v[1] for v in counts.values())]
    )
    what = f"{format_time(tr.start_ms)} .. {format_time(tr.end_ms)}" if tr else args.offsets
    target = printable(args.target, 200) if args.target else "(no target)"
    print(f"dry run: {printable(args.source, 200)} [{what}] -> {target}; nothing written")
    print(table(["partition", "offsets", "records", "would copy"], rows))
    return 0


def _summary(
    args: argparse.Namespace, cp: Checkpoint, stats: copier.CopyStats, kept: bool, path: Path
) -> None:
    rows = [
        [p, f"{s}-{e}", stats.written[p], stats.filtered[p]]
        for p, (s, e) in sorted(cp.ranges.items())
    ]
    rows.append(["total", "", sum(stats.written.values()), sum(stats.filtered.values())])
    print(
        f"replay {args.source} -> {args.target} ({'partitions kept' if kept else 'placed by key (murmur2)'})"
    )
    print(table(["partition", "offsets", "written", "filtered"], rows))
    n = sum(stats.written.values())
    rate = n / stats.elapsed_s if stats.elapsed_s > 0 else 0.0
    line = f"wrote {n:,} records in {stats.elapsed_s:.2f}s ({rate:,.0f} rec/s)"
    if cp.resumes:
        line += f"; resumed, {stats.skipped_on_resume:,} already written by the interrupted run were skipped"
    if stats.foreign_on_resume:
        line += f"; {stats.foreign_on_resume:,} records in the target were not this replay's"
    print(f"{line}; checkpoint {path}")


COMMAND = Command(
    "replay",
    help="copy a time or offset range of a topic into a target topic",
    description=__doc__,
    arguments=arguments,
    run=run,
)
