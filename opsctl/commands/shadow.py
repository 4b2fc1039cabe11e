"""`precast shadow --candidate VERSION`: what would change if we swapped models now? Runs a
time or offset range of the event topics through the live model and a candidate model with the
same worker pipeline, writes the candidate's PredictionSets to the shadow topic (never to the
predictions topic or the serving store), and reports how the two differ: top-1 agreement and
top-3 overlap (overall, per device type, site and trigger), the top-1 transition matrix, the
devices whose top-1 changes, inference time per version, and calibration against the
simulator's ground truth (`--truth`). Thresholds (`--require-agreement 0.95`, ...) make it a
gate: exit 1 when the candidate falls short, so a deployment script can run it before writing
the registry's ACTIVE file.

This side resolves the range and renders the report; the run itself is the workers' own
`python -m workers.shadow.run`, started as a subprocess (opsctl never imports an application)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit.filters import split_list
from opsctl.toolkit.job_checkpoint import fingerprint
from opsctl.toolkit.outcome_truth import write_truth
from opsctl.toolkit.ranges import TimeRange, add_range_args, range_inputs
from opsctl.toolkit.reader import resolve
from opsctl.toolkit.shadow_report import Thresholds, gate, render_html, render_text
from opsctl.toolkit.write_guard import partitions_of
from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.kafka import Admin
from precast.telemetry.progress import table
from schemas.spec import SpecError
from schemas.topics import EVENT_ROLES

GATE_FAILED = 1  # distinct from 2 (bad input) so a deploy script can tell them apart


def share(text: str) -> float:
    """argparse type: a share between 0 and 1."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return v


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--candidate", required=True, help="candidate: a registry version (1.1.0) or a folder"
    )
    parser.add_argument(
        "--live",
        help="live version or folder (default: what a worker serves now: the registry's ACTIVE "
        "version with PRECAST_MODEL__REGISTRY, else PRECAST_MODEL__PATH)",
    )
    parser.add_argument(
        "--registry",
        type=Path,
        help="model registry folder (default PRECAST_MODEL__REGISTRY, else the bundled models)",
    )
    add_range_args(parser, "events")
    parser.add_argument(
        "--events",
        action="append",
        help=f"event topics by role (default all: {', '.join(EVENT_ROLES)})",
    )
    parser.add_argument(
        "--all-triggers",
        action="store_true",
        help="compare on every trigger (as a backfill does) instead of the live policy's choices",
    )
    parser.add_argument(
        "--context-lookback",
        type=float,
        default=24.0,
        metavar="HOURS",
        help="with --from: fold this much of the work orders and alarms before the range into "
        "the devices' context first, as the live workers had it (default 24; 0 = none)",
    )
    parser.add_argument(
        "--truth",
        metavar="outcomes|DEVICES:SEED[:DRIFT]",
        help="score both models against a truth: `outcomes`, the range's resolved work orders "
        "(a device's predictions between an open and its resolution); or DEVICES:SEED, the "
        "range came from `precast-simulator --devices DEVICES --seed SEED`",
    )
    g = parser.add_argument_group("gate (exit 1 when one falls short)")
    g.add_argument("--require-agreement", type=share, metavar="SHARE", help="top-1 agreement")
    g.add_argument("--require-top3-overlap", type=share, metavar="SHARE", help="top-3 overlap")
    g.add_argument(
        "--require-accuracy",
        type=share,
        metavar="SHARE",
        help="candidate top-1 accuracy against the ground truth (needs --truth)",
    )
    g.add_argument(
        "--max-calibration-error",
        type=share,
        metavar="ECE",
        help="candidate expected calibration error (needs --truth)",
    )
    g.add_argument(
        "--max-accuracy-drop",
        type=share,
        metavar="SHARE",
        help="candidate top-1 accuracy at most this far below the live model's (needs --truth)",
    )
    g.add_argument(
        "--min-scored",
        type=int,
        metavar="N",
        help="fewer predictions scored against the truth than this fails (needs --truth)",
    )
    g.add_argument(
        "--min-predictions",
        type=int,
        metavar="N",
        help="fewer predictions compared than this fails (an empty range proves nothing)",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        help="where summary.json, report.json and report.html go "
        "(default: one folder per distinct command under PRECAST_OPS__STATE_DIR)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint file (default: one per distinct command under PRECAST_OPS__STATE_DIR)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="ignore an existing checkpoint and start over"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show the resolved ranges; run nothing"
    )
    parser.add_argument("--no-progress", action="store_true")


def thresholds(args: argparse.Namespace) -> Thresholds:
    needs = (args.require_accuracy, args.max_calibration_error, args.max_accuracy_drop)
    if (any(v is not None for v in needs) or args.min_scored is not None) and not args.truth:
        raise ConfigError(
            "--require-accuracy, --max-calibration-error, --max-accuracy-drop and --min-scored "
            "need --truth"
        )
    if not 0 <= args.context_lookback <= 24 * 90:
        raise ConfigError(f"--context-lookback {args.context_lookback:g} is not 0-2160 hours")
    if args.min_predictions is not None and args.min_predictions < 0:
        raise ConfigError(f"--min-predictions {args.min_predictions} is negative")
    return Thresholds(
        agreement=args.require_agreement,
        top3_overlap=args.require_top3_overlap,
        min_predictions=args.min_predictions,
        accuracy=args.require_accuracy,
        max_ece=args.max_calibration_error,
        max_accuracy_drop=args.max_accuracy_drop,
        min_scored=args.min_scored,
    )


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    limits = thresholds(args)
    tr, spec = range_inputs(args)
    roles = split_list(args.events) or list(EVENT_ROLES)
    unknown = [r for r in roles if r not in EVENT_ROLES]
    if unknown:
        raise ConfigError(f"unknown event role {unknown[0]!r}: known are {', '.join(EVENT_ROLES)}")
    t = settings.topics
    cat = t.catalog()
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    ranges, rows = _event_ranges(settings, admin, [getattr(cat, r).name for r in roles], tr, spec)
    warmup = _warmup_ranges(settings, admin, cat, tr, args.context_lookback)
    total = sum(row[3] for row in rows)
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON alone
    print(f"shadow of candidate {args.candidate}: {total:,} event records", file=out)
    print(table(["topic", "partition", "offsets", "records"], rows), file=out)
    if warmup:
        n = sum(e - s for parts in warmup.values() for _p, s, e in parts)
        print(f"context: {n:,} work orders and alarms before the range fold in first", file=out)
    if args.dry_run:
        print("dry run: nothing run", file=out)
        return 0
    admin.ensure_topics([cat.shadow_predictions])  # created on first use, by its contract
    job = fingerprint(
        {
            "cmd": "shadow",
            "kafka": settings.kafka.bootstrap_servers,
            "prefix": t.prefix,
            "candidate": args.candidate,
            "live": args.live,
            "registry": str(args.registry or ""),
            "from": args.time_from,
            "to": args.time_to,
            "offsets": args.offsets,
            "events": sorted(roles),
            "all": args.all_triggers,
            "truth": args.truth,
            "lookback": args.context_lookback,
        }
    )[:16]
    state = settings.ops.state_dir
    report_dir = args.report_dir or state / f"shadow-{job}"
    summary_path = report_dir / "summary.json"
    checkpoint = args.checkpoint or state / f"shadow-{job}.json"
    truth_file = None
    if args.truth == "outcomes":
        if tr is None:
            raise ConfigError("--truth outcomes needs a time range (--from [--to])")
        truth_file = report_dir / "outcomes.json"
        n = write_truth(
            settings.kafka, admin, _fleet(settings), cat, tr, int(time.time() * 1000), truth_file
        )
        print(f"truth: {n:,} work orders resolved since they opened in the range", file=out)
    cmd = _command(args, job, ranges, warmup, summary_path, checkpoint, truth_file)
    summary_path.unlink(missing_ok=True)  # a stale summary must never stand in for this run
    try:
        rc = subprocess.run(cmd, check=False).returncode
    except FileNotFoundError as exc:
        raise ConfigError(f"cannot start the workers' shadow run ({exc})") from None
    if rc != 0:
        return rc
    return report(summary_path, report_dir, limits, as_json=args.json)


def _event_ranges(
    settings: StackCliSettings, admin: Admin, topics: list[str], tr: TimeRange | None, spec: Any
) -> tuple[dict[str, list[list[int]]], list[list[Any]]]:
    """({topic: [[partition, start, end]]} of the non-empty ranges, a table row per partition)."""
    ranges: dict[str, list[list[int]]] = {}
    rows: list[list[Any]] = []
    for topic in topics:
        parts = partitions_of(
            admin, topic, settings.kafka.bootstrap_servers, " (PRECAST_TOPICS__PREFIX)"
        )
        for r in resolve(settings.kafka, topic, parts, tr, spec):
            rows.append([topic, r.partition, f"{r.start}-{r.end}", r.size])
            if r.size:
                ranges.setdefault(topic, []).append([r.partition, r.start, r.end])
    return ranges, rows


def _command(
    args: argparse.Namespace,
    job: str,
    ranges: dict[str, list[list[int]]],
    warmup: dict[str, list[list[int]]],
    summary: Path,
    checkpoint: Path,
    truth_file: Path | None = None,
) -> list[str]:
    cmd = [sys.executable, "-m", "workers.shadow.run", "--candidate", args.candidate, "--job", job]
    cmd += ["--ranges", json.dumps(ranges), "--warmup", json.dumps(warmup)]
    cmd += ["--summary", str(summary), "--checkpoint", str(checkpoint)]
    if truth_file is not None:
        cmd += ["--truth-file", str(truth_file)]
    for flag, value in (("--live", args.live), ("--registry", args.registry)):
        if value:
            cmd += [flag, str(value)]
    for flag, on in (
        ("--truth", args.truth if truth_file is None else None),
        ("--all-triggers", args.all_triggers),
        ("--fresh", args.fresh),
        ("--no-progress", args.no_progress),
    ):
        if on:
            cmd += [flag] if on is True else [flag, str(on)]
    return cmd


def _fleet(settings: StackCliSettings) -> Fleet:
    try:
        return load_fleet(settings.fleet.spec)
    except SpecError as exc:
        raise ConfigError(str(exc)) from None


def _warmup_ranges(
    settings: StackCliSettings, admin: Admin, cat: Any, tr: TimeRange | None, hours: float
) -> dict[str, list[list[int]]]:
    """Offsets of the work orders and alarms in the `hours` before a time range's start."""
    if tr is None or hours <= 0:
        return {}
    before = TimeRange(tr.start_ms - int(hours * 3_600_000), tr.start_ms)
    out: dict[str, list[list[int]]] = {}
    for role in ("work_orders", "alarms"):
        topic = getattr(cat, role).name
        parts = partitions_of(admin, topic, settings.kafka.bootstrap_servers)
        for r in resolve(settings.kafka, topic, parts, before, None):
            if r.size:
                out.setdefault(topic, []).append([r.partition, r.start, r.end])
    return out


def report(summary_path: Path, report_dir: Path, limits: Thresholds, as_json: bool) -> int:
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"the shadow run left no readable summary at {summary_path}: {exc}"
        ) from None
    checks = gate(summary, limits)
    passed = all(c.ok for c in checks)
    doc = {
        **summary,
        "gate": {"passed": passed, "checks": [{**c.__dict__, "ok": c.ok} for c in checks]},
    }
    doc["comparison"] = {
        k: v for k, v in summary["comparison"].items() if k != "changed_device_ids"
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.json").write_text(json.dumps(doc, indent=1))
    (report_dir / "report.html").write_text(render_html(summary, checks))
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        print(render_text(summary, checks))
        print(f"\nreport: {report_dir / 'report.html'} (JSON: {report_dir / 'report.json'})")
    if not passed:
        print(
            f"shadow gate failed: {'; '.join(c.line() for c in checks if not c.ok)}",
            file=sys.stderr,
        )
        return GATE_FAILED
    return 0


COMMAND = Command(
    "shadow",
    help="run a range through a candidate model beside the live one; report and gate",
    description=__doc__,
    raw_description=True,
    arguments=arguments,
    run=run,
)
