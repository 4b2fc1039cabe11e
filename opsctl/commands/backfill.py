"""`precast backfill --model DIR`: run a range of device events through a chosen model version
into the predictions topic (e.g. to warm a new version before switching to it); the outputs are
marked as backfill in their lineage.

A backfill ranks below a live answer computed from the same data (schemas.predictions.order_key):
it fills devices whose live answer is older or missing and never replaces what the live workers
serve, however recent the range. `--outrank-live` makes its outputs rank like live answers (the
new model is then served for every device whose newest data is in the range, before anyone
switched the workers to it), so it acts only with `--yes`.

This side resolves the range (UTC times or offsets, on each event topic) and hands it to the
workers' own entry point, `python -m workers.precompute.backfill`, as a subprocess: the shared package
never imports an application."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit.filters import split_list
from opsctl.toolkit.ranges import add_range_args, range_inputs
from opsctl.toolkit.reader import resolve
from opsctl.toolkit.write_guard import partitions_of
from precast.errors import ConfigError
from precast.kafka import Admin
from precast.telemetry.progress import table
from schemas.topics import EVENT_ROLES


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, type=Path, help="model folder (model.onnx + manifest.json)"
    )
    add_range_args(parser, "events")
    parser.add_argument(
        "--events",
        action="append",
        help=f"event topics by role (default all: {', '.join(EVENT_ROLES)})",
    )
    parser.add_argument(
        "--outrank-live",
        action="store_true",
        help="let the outputs replace live answers of the same data (needs --yes)",
    )
    parser.add_argument("--yes", action="store_true", help="with --outrank-live: really do it")
    parser.add_argument(
        "--dry-run", action="store_true", help="show the resolved ranges; run nothing"
    )
    parser.add_argument("--no-progress", action="store_true")


def model_version(folder: Path) -> str:
    manifest = folder / "manifest.json"
    if not (folder / "model.onnx").is_file() or not manifest.is_file():
        raise ConfigError(
            f"no model at {folder}: expected model.onnx and manifest.json (docs/models.md)"
        )
    try:
        doc = json.loads(manifest.read_text())
        return f"{doc['name']} {doc['version']}"
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"unreadable {manifest}: {exc}") from None


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    version = model_version(args.model)
    tr, spec = range_inputs(args)
    roles = split_list(args.events) or list(EVENT_ROLES)
    unknown = [r for r in roles if r not in EVENT_ROLES]
    if unknown:
        raise ConfigError(f"unknown event role {unknown[0]!r}: known are {', '.join(EVENT_ROLES)}")
    cat = settings.topics.catalog()
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    ranges: dict[str, list[list[int]]] = {}
    rows = []
    for role in roles:
        topic = getattr(cat, role).name
        parts = partitions_of(
            admin, topic, settings.kafka.bootstrap_servers, " (PRECAST_TOPICS__PREFIX)"
        )
        for r in resolve(settings.kafka, topic, parts, tr, spec):
            rows.append([topic, r.partition, f"{r.start}-{r.end}", r.size])
            if r.size:
                ranges.setdefault(topic, []).append([r.partition, r.start, r.end])
    total = sum(row[3] for row in rows)
    print(f"backfill through {version}: {total:,} event records")
    print(table(["topic", "partition", "offsets", "records"], rows))
    if args.outrank_live and not args.yes and not args.dry_run and total:
        print(
            f"dry run: with --outrank-live the outputs of {version} replace the live answer of "
            f"every device whose newest data is in these ranges ({cat.predictions.name}); "
            "nothing run: add --yes to do it"
        )
        return 0
    if args.dry_run or not total:
        print("dry run: nothing run" if args.dry_run else "nothing to backfill")
        return 0
    cmd = [
        sys.executable,
        "-m",
        "workers.precompute.backfill",
        "--model",
        str(args.model),
        "--ranges",
        json.dumps(ranges),
    ]
    if args.no_progress:
        cmd.append("--no-progress")
    if args.outrank_live:
        cmd.append("--outrank-live")
    try:
        return subprocess.run(cmd, check=False).returncode
    except FileNotFoundError as exc:
        raise ConfigError(f"cannot start the workers' backfill ({exc})") from None


COMMAND = Command(
    "backfill",
    help="run a range of events through a chosen model version into predictions",
    description=__doc__,
    arguments=arguments,
    run=run,
)
