"""`precast promote VERSION`: make a registry version the one the workers serve, only after the
shadow gate passed on a recent range of real traffic.

The gate is `precast shadow` with the live version (the registry's ACTIVE one) against VERSION
on the last `--recent` hours, by default scored against the range's resolved work orders
(`--truth outcomes`): the candidate's top-1 accuracy may not fall below the live model's
(`--max-accuracy-drop 0`), on at least `--min-scored` scored predictions out of at least
`--min-predictions` compared. It passes: ACTIVE is replaced and the workers hot-swap at their
next registry poll. It fails: the report is printed, nothing changes, exit 1. `--force --reason
TEXT` promotes anyway and records why. Every decision (promoted, refused, forced, rolled back)
is appended to the registry's PROMOTIONS.jsonl; `--rollback` goes back to the version the
current one replaced, `--history` prints the log."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import time
from pathlib import Path
from typing import Any

from opsctl.commands import shadow
from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit.ranges import format_time
from precast.errors import ConfigError
from precast.models import layout
from precast.telemetry.progress import table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", nargs="?", help="registry version to serve, e.g. 1.2.0")
    parser.add_argument(
        "--registry", type=Path, help="model registry folder (default PRECAST_MODEL__REGISTRY)"
    )
    parser.add_argument(
        "--recent",
        type=float,
        default=1.0,
        metavar="HOURS",
        help="gate on the events of the last HOURS (default 1)",
    )
    parser.add_argument(
        "--from", dest="time_from", metavar="TIME", help="gate on this range instead"
    )
    parser.add_argument("--to", dest="time_to", metavar="TIME")
    parser.add_argument(
        "--truth",
        default="outcomes",
        help="what accuracy is measured against (default outcomes: resolved work orders; "
        "DEVICES:SEED for a simulated fleet; none: gate on agreement and counts only)",
    )
    parser.add_argument(
        "--all-triggers",
        action="store_true",
        help="compare on every trigger, not only the live policy's choices (more scored rows)",
    )
    g = parser.add_argument_group("gate (the shadow run's thresholds)")
    g.add_argument("--max-accuracy-drop", type=shadow.share, default=0.0, metavar="SHARE")
    g.add_argument("--min-scored", type=int, default=50, metavar="N")
    g.add_argument("--min-predictions", type=int, default=100, metavar="N")
    g.add_argument("--require-agreement", type=shadow.share, metavar="SHARE")
    g.add_argument("--require-top3-overlap", type=shadow.share, metavar="SHARE")
    parser.add_argument("--force", action="store_true", help="promote even if the gate fails")
    parser.add_argument("--reason", help="why (required with --force; kept in the promotions log)")
    parser.add_argument(
        "--rollback",
        action="store_true",
        help="serve again the version the current one replaced (no gate)",
    )
    parser.add_argument("--history", action="store_true", help="print the promotions log")
    parser.add_argument("--report-dir", type=Path, help="where the gate's report goes")
    parser.add_argument("--no-progress", action="store_true")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def _registry(args: argparse.Namespace, settings: StackCliSettings) -> Path:
    reg = args.registry or settings.model.registry
    if reg is None:
        raise ConfigError("no model registry: pass --registry or set PRECAST_MODEL__REGISTRY")
    if not reg.is_dir():
        raise ConfigError(f"model registry {reg} is not a folder")
    return reg


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    modes = [bool(args.version), args.rollback, args.history]
    if sum(modes) != 1:
        raise ConfigError("give a VERSION to promote, --rollback or --history (one of them)")
    if args.force and not (args.reason or "").strip():
        raise ConfigError("--force needs --reason: the promotions log keeps why")
    if args.force and not args.version:
        raise ConfigError("--force goes with a VERSION")
    if not 0 < args.recent <= 24 * 7:
        raise ConfigError(f"--recent {args.recent:g} is not 0-168 hours")
    reg = _registry(args, settings)
    if args.history:
        return _history(reg)
    current = layout.wanted_version(reg)
    if args.rollback:
        return _rollback(reg, current, args.reason)
    version = str(args.version)
    have = layout.versions(reg)
    if version not in have:
        raise ConfigError(
            f"no version {version} in model registry {reg} (have: {', '.join(have) or 'none'})"
        )
    if version == current:
        since = layout.serving_since(reg, version)
        when = f" since {format_time(since['at_ms'])}" if since else ""
        print(f"{version} already serves{when}; nothing to do")
        return 0
    if (current is None or current not in have) and not args.force:
        raise ConfigError(
            f"model registry {reg} serves no version to compare {version} with "
            f"(ACTIVE: {current!r}); promote it with --force --reason"
        )
    return _gated(args, settings, reg, version, current)


# A distilled or quantized candidate is meant to answer as its teacher does: unless told
# otherwise, the gate holds it to this top-1 agreement with the live model (bench slim's goal).
SLIM_AGREEMENT = 0.99


def _agreement(given: float | None, reg: Path, version: str) -> float | None:
    if given is not None:
        return given
    try:
        method = json.loads((reg / version / "manifest.json").read_text()).get("method")
    except (OSError, ValueError, AttributeError):
        return None
    if not method:
        return None
    print(
        f"gate: {version} is a {method} candidate: top-1 agreement >= {SLIM_AGREEMENT:g} with the "
        "live model required (--require-agreement to change it)"
    )
    return SLIM_AGREEMENT


def _gated(
    args: argparse.Namespace,
    settings: StackCliSettings,
    reg: Path,
    version: str,
    current: str | None,
) -> int:
    now = int(time.time() * 1000)
    time_from = args.time_from or format_time(now - int(args.recent * 3_600_000))
    time_to = args.time_to or (None if args.time_from else format_time(now))
    report_dir = args.report_dir or settings.ops.state_dir / f"promote-{version}-{now}"
    gate_args = argparse.Namespace(
        candidate=version,
        live=current,
        registry=reg,
        time_from=time_from,
        time_to=time_to,
        offsets=None,
        events=None,
        all_triggers=args.all_triggers,
        context_lookback=24.0,
        truth=None if args.truth == "none" else args.truth,
        require_agreement=_agreement(args.require_agreement, reg, version),
        require_top3_overlap=args.require_top3_overlap,
        require_accuracy=None,
        max_calibration_error=None,
        max_accuracy_drop=None if args.truth == "none" else args.max_accuracy_drop,
        min_scored=None if args.truth == "none" else args.min_scored,
        min_predictions=args.min_predictions,
        report_dir=report_dir,
        json=False,
        checkpoint=report_dir / "checkpoint.json",
        fresh=True,  # a promotion judges today's traffic, never a cached run
        dry_run=False,
        no_progress=args.no_progress,
    )
    if current is None or current not in layout.versions(reg):
        rc, verdict = shadow.GATE_FAILED, "skipped"  # nothing serves to compare with (--force)
        print(f"gate: skipped, no live version in {reg} to compare {version} with")
    else:
        print(
            f"gate: shadow of {version} against live {current}, {time_from} .. {time_to or 'now'}"
        )
        rc = shadow.run(gate_args, settings)
        verdict = "passed" if rc == 0 else "failed"
    if rc not in (0, shadow.GATE_FAILED):
        return rc  # the shadow run itself failed: nothing decided, nothing recorded
    passed = rc == 0
    entry = {
        "version": version,
        "previous": current,
        "gate": verdict,
        "checks": _checks(report_dir),
        "report": str(report_dir / "report.html"),
        "range": [time_from, time_to],
        "by": _user(),
        "reason": args.reason,
    }
    if not passed and not args.force:
        layout.record(reg, {"action": "refused", **entry})
        print(f"not promoted: {version} failed the gate; {current} still serves (report above)")
        return shadow.GATE_FAILED
    layout.write_active(reg, version)
    layout.record(reg, {"action": "promote", "forced": not passed, **entry})
    how = "promoted" if passed else f"promoted despite the failed gate (--force: {args.reason})"
    print(
        f"{how}: {version} (was {current}); ACTIVE written in {reg}; workers swap at their next "
        "registry poll (PRECAST_MODEL__REGISTRY_POLL_S) or on kill -HUP"
    )
    return 0


def _checks(report_dir: Path) -> list[dict[str, Any]]:
    try:
        doc = json.loads((report_dir / "report.json").read_text())
        checks: list[dict[str, Any]] = doc["gate"]["checks"]
        return checks
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _rollback(reg: Path, current: str | None, reason: str | None) -> int:
    promoted = [d for d in layout.history(reg) if d.get("action") == "promote"]
    last = next((d for d in reversed(promoted) if d.get("version") == current), None)
    if last is None or not last.get("previous"):
        raise ConfigError(
            f"no promotion of {current} in {reg / layout.PROMOTIONS_FILE} says what served before; "
            "promote a version explicitly (precast promote VERSION --force --reason ...)"
        )
    target = str(last["previous"])
    if target not in layout.versions(reg):
        raise ConfigError(f"cannot roll back to {target}: no such version in {reg} any more")
    layout.write_active(reg, target)
    layout.record(
        reg,
        {
            "action": "rollback",
            "version": target,
            "previous": current,
            "by": _user(),
            "reason": reason or "rollback",
        },
    )
    print(f"rolled back: {target} serves again (was {current}); ACTIVE written in {reg}")
    return 0


def _history(reg: Path) -> int:
    rows = [
        [
            format_time(int(d.get("at_ms", 0))),
            d.get("action", "?"),
            d.get("version", "?"),
            d.get("previous") or "-",
            d.get("gate", "-") + (" (forced)" if d.get("forced") else ""),
            d.get("by", "?"),
            d.get("reason") or "",
        ]
        for d in layout.history(reg)
    ]
    current = layout.wanted_version(reg)
    since = layout.serving_since(reg, current) if current else None
    print(table(["at", "action", "version", "previous", "gate", "by", "reason"], rows))
    when = f" since {format_time(since['at_ms'])}" if since else ""
    print(f"serving: {current or 'nothing'}{when}")
    return 0


COMMAND = Command(
    "promote",
    help="serve a registry version after the shadow gate passes (or roll back)",
    description=__doc__,
    raw_description=True,
    arguments=arguments,
    run=run,
)
