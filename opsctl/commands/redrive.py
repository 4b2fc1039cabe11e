"""`precast deadletters redrive`: after a fix, send selected dead letters back to the topic they
were rejected from, with their original key, value and headers. It runs on the replay engine,
so it has the same checkpoint: rerunning the command after a crash continues without sending
anything twice, and rerunning a finished one does nothing.

Only back where a record came from, and only inside this deployment's catalog: it reads the
catalog's dead-letter topic (never any other topic: a topic cannot be poured into itself), and
a record whose `dlq.source.topic` is missing, outside the catalog (another prefix, a scratch
topic), the dead-letter topic or a topic nobody consumes is left where it is and counted, and so
is a truncated letter (`dlq.value.truncated`: its value is a preview, never the record).
Without `--yes` it is a dry run: counts per target topic, reason and what it leaves."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from opsctl.settings import StackCliSettings
from opsctl.toolkit import copier, escape
from opsctl.toolkit.deadletter_select import DeadLetterFilter, dead_letter_topic, read_matching
from opsctl.toolkit.job_checkpoint import Checkpoint, fingerprint, load_for
from opsctl.toolkit.ranges import OffsetRange, range_inputs
from opsctl.toolkit.reader import resolve
from opsctl.toolkit.replay_pacing import ReplaySchedule
from opsctl.toolkit.write_guard import input_role
from precast.deadletter import dead_letter_info, is_truncated, original_headers, original_key
from precast.errors import ConfigError
from precast.hygiene import printable
from precast.kafka import Admin, KafkaMessage
from precast.settings import TopicSettings
from precast.telemetry.progress import table
from schemas.partitioning import partition_for


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rate", type=float, help="at most this many records per second")
    ap.add_argument(
        "--keep-timestamps", action="store_true", help="write the records' original timestamps"
    )
    ap.add_argument(
        "--yes", action="store_true", help="send them (without it: a dry run that counts them)"
    )
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be sent, per target and reason (the default without --yes)",
    )
    ap.add_argument(
        "--checkpoint", type=Path, help="checkpoint file (default: one per distinct command)"
    )
    ap.add_argument(
        "--fresh", action="store_true", help="ignore an existing checkpoint and start over"
    )


TRUNCATED_WHY = (
    "truncated: the letter holds a preview of the value, the full record stays at its source "
    "offset (`deadletters inspect` names it)"
)


def target_of(info: dict[str, str], topics: TopicSettings) -> tuple[str | None, str]:
    """(the topic to send a dead letter back to, "") or (None, why it stays)."""
    if is_truncated(info):  # its value is only a preview: sending it would write a cut record
        return None, TRUNCATED_WHY
    source = info.get("source.topic")
    if not source:
        return None, "no source topic recorded"
    if source == topics.catalog().dead_letters.name:
        return None, "source is the dead-letter topic itself"
    if topics.catalog().by_name(source) is None:
        return None, f"source {source[:80]} is outside this deployment's catalog"
    if input_role(topics, source) is None:
        return None, f"nothing consumes {source[:80]}"
    return source, ""


def make_route(
    flt: DeadLetterFilter, topics: TopicSettings, partitions: dict[str, int]
) -> copier.Route:
    def route(m: KafkaMessage) -> copier.Out | None:
        headers = m.headers()
        info = dead_letter_info(headers)
        if not flt.matches(m.key(), info, headers):
            return None
        topic, _why = target_of(info, topics)
        n = partitions.get(topic) if topic else None
        if topic is None or n is None:
            return None  # left where it is (counted by the first pass)
        key = original_key(m.key(), headers)
        src_p = info.get("source.partition", "0")
        part = partition_for(key, n) if key else (int(src_p) if src_p.isdigit() else 0) % n
        ts = info.get("source.timestamp_ms", "")
        return (
            topic,
            part,
            key,
            m.value(),
            original_headers(headers),
            int(ts) if ts.isdigit() else 0,
        )

    return route


def _targets(
    settings: StackCliSettings,
    topic: str,
    ranges: list[OffsetRange],
    flt: DeadLetterFilter,
    progress: bool,
) -> tuple[Counter, Counter, Counter]:
    """(records per target topic, per reason, per reason to leave one) among the selected
    dead letters: a first pass, so every target is known (and checked) before anything is
    written."""
    per_target: Counter[str] = Counter()
    per_reason: Counter[str] = Counter()
    left: Counter[str] = Counter()
    for _m, info in read_matching(settings, topic, ranges, flt, "select", progress):
        target, why = target_of(info, settings.topics)
        if target is None:
            left[why] += 1
            continue
        per_target[target] += 1
        per_reason[info.get("reason", "-")] += 1
    return per_target, per_reason, left


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    flt = DeadLetterFilter.from_args(args)
    tr, spec = range_inputs(args, default_all=True)
    pacer = ReplaySchedule(rate=args.rate)
    own = settings.topics.catalog().dead_letters.name
    if args.topic and args.topic != own:
        raise ConfigError(
            f"redrive reads only this deployment's dead-letter topic {own!r}, not "
            f"{args.topic!r} (PRECAST_TOPICS__PREFIX names the deployment)"
        )
    dry_run = args.dry_run or not args.yes
    dlq, parts = dead_letter_topic(args, settings)
    params = {
        "cmd": "redrive",
        "cluster": settings.kafka.bootstrap_servers,
        "topic": dlq,
        "filter": flt.describe(),
        "from": args.time_from,
        "to": args.time_to,
        "offsets": args.offsets,
        "to_topic": None,
        "keep_ts": args.keep_timestamps,
    }
    fp = fingerprint(params)
    path = args.checkpoint or settings.ops.state_dir / f"redrive-{fp[:16]}.json"
    cp = None if dry_run else load_for(path, fp, args.fresh)
    if cp is not None and cp.complete:
        print(
            f"nothing to do: this redrive completed ({cp.written:,} records sent); checkpoint {path}; "
            f"pass --fresh to run it again"
        )
        return 0
    ranges = (
        [OffsetRange(p, s, e) for p, (s, e) in sorted(cp.ranges.items())]
        if cp is not None
        else resolve(settings.kafka, dlq, parts, tr, spec)
    )
    per_target, per_reason, left = _targets(settings, dlq, ranges, flt, not args.no_progress)
    admin = Admin(settings.kafka)
    existing = admin.topic_partitions()
    missing = [t for t in per_target if t not in existing]
    if left:
        print(f"{sum(left.values()):,} selected dead letters stay where they are:")
        print(table(["why", "records"], escape.rows(sorted(left.items()))))
    if dry_run:
        print(
            f"dry run: {sum(per_target.values()):,} dead letters would be sent back from {dlq}; "
            "nothing written" + ("; add --yes to send them" if per_target else "")
        )
        print(table(["target topic", "records"], escape.rows(sorted(per_target.items()))))
        print(table(["reason", "records"], escape.rows(sorted(per_reason.items()))))
        if missing:
            print(
                f"missing target topics (a real run refuses): {printable(', '.join(missing), 400)}"
            )
        return 0
    if missing:
        raise ConfigError(
            f"cannot redrive to topic {missing[0]!r}: it does not exist "
            f"({per_target[missing[0]]} dead letters came from it); run `precast topics ensure`"
        )
    if not per_target:
        print("no dead letters match; nothing sent")
        return 0
    resumed = cp is not None
    if cp is None:
        cp = Checkpoint(
            fingerprint=fp,
            run_id=fp[:12],
            source_topic=dlq,
            ranges={r.partition: [r.start, r.end] for r in ranges},
            next={r.partition: r.start for r in ranges},
            scan_from={},
        )
    targets = {t: existing[t] for t in per_target}
    job = copier.CopyJob(
        settings.kafka,
        dlq,
        settings.kafka,
        targets,
        make_route(flt, settings.topics, targets),
        args.keep_timestamps,
        pacer,
        settings.ops,
        path,
        progress=not args.no_progress,
        label="redrive",
    )
    stats = copier.run(job, cp, resumed=resumed)
    sent = sum(stats.written.values())
    print(f"redrive {dlq} -> {', '.join(sorted(targets))}")
    print(table(["target topic", "records"], sorted(per_target.items())))
    line = f"sent {sent:,} dead letters in {stats.elapsed_s:.2f}s"
    if resumed:
        line += f"; resumed, {stats.skipped_on_resume:,} already sent by the interrupted run were skipped"
    print(f"{line}; checkpoint {path}")
    return 0
