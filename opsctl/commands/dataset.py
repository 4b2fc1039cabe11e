"""`precast dataset build --from T1 --to T2 --out DIR`: point-in-time training rows from the
event topics. For every work order opened in the range that got a resolution (the fleet spec's
`[outcomes]`), the features the worker would have computed when it was opened: the device's
newest heartbeat and its context as of that instant, nothing later. Parquet parts (one per
partition) plus a manifest (spec hashes, range, counts, rows dropped and why). Resumable: the
same command after a crash continues from the last finished partition.

`precast dataset show DIR` prints a dataset's manifest."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from opsctl.commands.base import Action, Command
from opsctl.dataset import parts
from opsctl.dataset.build import Plan, build_partition, make_plan
from opsctl.settings import StackCliSettings
from opsctl.toolkit.job_checkpoint import fingerprint, save_json
from opsctl.toolkit.ranges import format_time, parse_time, parse_time_range
from opsctl.toolkit.reader import range_consumer
from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.fleet.outcomes import FIXED_COLUMNS, Window
from precast.kafka import Admin
from precast.telemetry.progress import bar, table
from schemas.spec import SpecError


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="time_from", required=True, metavar="TIME", help="opens from"
    )
    parser.add_argument(
        "--to", dest="time_to", metavar="TIME", help="opens before this (UTC ISO 8601; now)"
    )
    parser.add_argument("--out", type=Path, required=True, help="dataset folder to write")
    parser.add_argument(
        "--resolved-until",
        metavar="TIME",
        help="resolutions recorded before this count (default: now, fixed by the first run)",
    )
    parser.add_argument(
        "--context-lookback",
        type=float,
        default=24.0,
        metavar="HOURS",
        help="work orders and alarms this long before --from fold into the context (default 24)",
    )
    parser.add_argument(
        "--heartbeat-lookback",
        type=float,
        default=15.0,
        metavar="MINUTES",
        help="an open's heartbeat may be this old; older: the row is dropped (default 15)",
    )
    parser.add_argument("--fresh", action="store_true", help="discard a previous build in --out")
    parser.add_argument("--no-progress", action="store_true")


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path)


def _fleet(settings: StackCliSettings) -> Fleet:
    try:
        fleet = load_fleet(settings.fleet.spec)
    except SpecError as exc:
        raise ConfigError(str(exc)) from None
    if fleet.spec.outcomes is None:
        raise ConfigError(
            f"fleet spec {fleet.name!r} declares no [outcomes]: nothing says how a work order "
            "was resolved (docs/fleets.md, Outcomes)"
        )
    clash = sorted(set(FIXED_COLUMNS) & set(fleet.features.names))
    if clash:
        raise ConfigError(f"feature column {clash[0]!r} clashes with a dataset column")
    return fleet


def window_of(args: argparse.Namespace, now_ms: int) -> Window:
    tr = parse_time_range(args.time_from, args.time_to, now_ms)
    until = parse_time(args.resolved_until, "--resolved-until") if args.resolved_until else now_ms
    if until < tr.end_ms:
        raise ConfigError(
            f"--resolved-until {format_time(until)} is before --to {format_time(tr.end_ms)}"
        )
    if not 0 <= args.context_lookback <= 24 * 90:
        raise ConfigError(f"--context-lookback {args.context_lookback:g} is not 0-2160 hours")
    if not 0 < args.heartbeat_lookback <= 24 * 60:
        raise ConfigError(f"--heartbeat-lookback {args.heartbeat_lookback:g} is not 0-1440 min")
    return Window(
        tr.start_ms,
        tr.end_ms,
        until,
        round(args.context_lookback * 3_600_000),
        round(args.heartbeat_lookback * 60_000),
    )


def _out_folder(out: Path, fresh: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create --out {out}: {exc.strerror}") from None
    if fresh:
        parts.clear(out)


def run_build(args: argparse.Namespace, settings: StackCliSettings) -> int:
    parts.require_pyarrow()
    fleet = _fleet(settings)
    now = int(time.time() * 1000)
    t = settings.topics
    job = {
        "kafka": settings.kafka.bootstrap_servers,
        "prefix": t.prefix,
        "from": args.time_from,
        "to": args.time_to,
        "resolved_until": args.resolved_until,
        "context_lookback_h": args.context_lookback,
        "heartbeat_lookback_min": args.heartbeat_lookback,
        "fleet": fleet.name,
        "feature_hash": fleet.features.hash,
        "context_hash": fleet.context.hash,
    }
    fp = fingerprint(job)
    window = window_of(args, now)  # bad arguments fail before anything is written
    _out_folder(args.out, args.fresh)
    done = parts.read_json(args.out / parts.MANIFEST, "dataset manifest")
    if done is not None:
        if done.get("fingerprint") != fp:
            raise ConfigError(
                f"{args.out} holds another dataset ({done.get('range', {}).get('from')} ..); "
                "use another --out or pass --fresh"
            )
        print(f"nothing to do: {args.out} holds this dataset ({done['counts']['rows']:,} rows)")
        return 0
    cp = parts.read_json(args.out / parts.CHECKPOINT, "dataset checkpoint")
    if cp is not None and cp.get("fingerprint") != fp:
        raise ConfigError(
            f"{args.out} holds an unfinished build of another dataset; "
            "use another --out or pass --fresh"
        )
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    if cp is None:
        topics = t.catalog()
        plan = make_plan(settings.kafka, admin, fleet, topics, window)
        cp = {"fingerprint": fp, "job": job, "plan": plan.to_json(), "done": {}, "resumes": 0}
        parts.save_checkpoint(args.out, cp)
    else:
        plan = Plan.from_json(cp["plan"])
        cp["resumes"] = int(cp.get("resumes", 0)) + 1
        print(f"resuming {args.out}: {len(cp['done'])} of {plan.partitions} partitions done")
    return _build(args, settings, fleet, plan, cp)


def _build(
    args: argparse.Namespace,
    settings: StackCliSettings,
    fleet: Fleet,
    plan: Plan,
    cp: dict[str, Any],
) -> int:
    for stale in args.out.glob("part-*.parquet.tmp"):  # a part the crashed run did not finish
        stale.unlink()
    w = plan.window
    print(
        f"dataset {fleet.describe()}: work orders opened {format_time(w.from_ms)} .. "
        f"{format_time(w.to_ms)}, resolved before {format_time(w.resolved_until_ms)}; "
        f"{plan.size():,} records in {plan.partitions} partitions"
    )
    todo = [p for p in range(plan.partitions) if str(p) not in cp["done"]]
    progress = bar(sum(plan.size(p) for p in todo), "dataset", enabled=not args.no_progress)
    t0 = time.monotonic()
    read = 0
    consumer = range_consumer(settings.kafka, "dataset")
    try:
        for p in todo:
            rows = build_partition(consumer, fleet, plan, p, progress.update)
            n = parts.write_part(args.out, p, rows.rows(), fleet.features.names)
            read += sum(rows.read.values())
            cp["done"][str(p)] = {
                "rows": n,
                "labels": len(rows.labels),
                "read": dict(rows.read),
                "dropped": dict(rows.dropped),
                "rejected": dict(rows.rejected),
                "by_label": dict(Counter(lab.label for lab in rows.labels)),
            }
            parts.save_checkpoint(args.out, cp)
    finally:
        progress.close()
        consumer.close()
    elapsed = time.monotonic() - t0
    manifest = _manifest(fleet, plan, cp, args.out)
    save_json(args.out / parts.MANIFEST, manifest)
    _summary(cp, manifest, read, elapsed, args.out)
    return 0


def _manifest(fleet: Fleet, plan: Plan, cp: dict[str, Any], out: Path) -> dict[str, Any]:
    done = cp["done"]

    def total(key: str) -> dict[str, int]:
        c: Counter[str] = Counter()
        for d in done.values():
            c.update(d[key])
        return dict(sorted(c.items()))

    w = plan.window
    return {
        "format": parts.FORMAT,
        "fingerprint": cp["fingerprint"],
        "fleet": {
            "name": fleet.name,
            "version": fleet.spec.fleet.version,
            "feature_hash": fleet.features.hash,
            "context_hash": fleet.context.hash,
        },
        "features": list(fleet.features.names),
        "labels": list(fleet.spec.labels),
        "columns": [*FIXED_COLUMNS, "partition"],
        "time_column": "time_ms",
        "range": {
            "from": format_time(w.from_ms),
            "to": format_time(w.to_ms),
            "resolved_until": format_time(w.resolved_until_ms),
            **w.__dict__,
        },
        "topics": plan.topics,
        "offsets": cp["plan"]["ranges"],
        "parts": [parts.part_name(int(p)) for p in sorted(done, key=int) if done[p]["rows"]],
        "counts": {
            "rows": sum(d["rows"] for d in done.values()),
            "labelled_work_orders": sum(d["labels"] for d in done.values()),
            "by_label": total("by_label"),
            "records_read": total("read"),
        },
        "dropped": total("dropped"),
        "rejected": total("rejected"),
        "resumes": cp.get("resumes", 0),
        "created_at": format_time(int(time.time() * 1000)),
        "folder": str(out),
    }


def _summary(
    cp: dict[str, Any], manifest: dict[str, Any], read: int, elapsed: float, out: Path
) -> None:
    rows = []
    for p in sorted(cp["done"], key=int):
        d = cp["done"][p]
        rows.append(
            [p, sum(d["read"].values()), d["labels"], d["rows"], sum(d["dropped"].values())]
        )
    c = manifest["counts"]
    rows.append(
        [
            "total",
            sum(r[1] for r in rows),
            c["labelled_work_orders"],
            c["rows"],
            sum(manifest["dropped"].values()),
        ]
    )
    print(table(["partition", "records read", "resolved", "rows", "dropped"], rows))
    why = ", ".join(f"{k} {v:,}" for k, v in manifest["dropped"].items()) or "none"
    print(f"dropped: {why}")
    if manifest["rejected"]:
        print("rejected: " + ", ".join(f"{k} {v:,}" for k, v in manifest["rejected"].items()))
    print("rows by label: " + (", ".join(f"{k} {v:,}" for k, v in c["by_label"].items()) or "none"))
    rate = read / elapsed if elapsed > 0 else 0.0
    print(
        f"wrote {c['rows']:,} rows to {out} in {elapsed:.2f}s "
        f"({read:,} records read, {rate:,.0f} rec/s); manifest {out / parts.MANIFEST}"
    )


def run_show(args: argparse.Namespace, settings: StackCliSettings) -> int:
    print(json.dumps(parts.load_manifest(args.folder), indent=1))
    return 0


COMMAND = Command(
    "dataset",
    help="point-in-time training rows from the topics' resolved work orders",
    description=__doc__,
    raw_description=True,
    actions=(
        Action(
            "build",
            help="build a dataset folder from a time range",
            run=run_build,
            arguments=_build_arguments,
        ),
        Action("show", help="print a dataset's manifest", run=run_show, arguments=_show_arguments),
    ),
)
