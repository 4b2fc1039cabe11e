"""`python -m workers.shadow.run --candidate VERSION --ranges JSON --summary FILE`: run bounded
offset ranges of the event topics through the live model and a candidate model side by side,
with one worker pipeline (decode, speculation policy, context, features): every batch's feature
rows go through both models. The candidate's PredictionSets go to the shadow topic; nothing
goes to the predictions topic, the dead-letter topic or the serving store. What differs is
accumulated in `workers.shadow.compare.Comparison` and written to the summary file, which
`precast shadow` turns into the report and the gate.

The policy runs on the records' own clock (their timestamps), so throttling and refreshes
decide as they did at the time, whatever the replay speed. A checkpoint (`--checkpoint`) is
saved every few seconds after everything read so far is predicted and the shadow outputs are
acknowledged; a rerun with the same checkpoint continues from there (the device table is not
saved: after a resume each device's first heartbeat counts as first seen).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.fleet.simulate.truth import true_labels
from precast.kafka import Admin, TopicPartitionOffset
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.progress import bar
from workers.model.inference import ModelSession
from workers.model.registry import wanted_version
from workers.precompute.assembly import LoopParts
from workers.precompute.backfill import parse_ranges
from workers.precompute.cli import build
from workers.precompute.loop import tune_gc
from workers.settings import DEFAULT_MODEL_DIR, WorkerSettings
from workers.shadow.compare import Comparison
from workers.shadow.replay import Checkpointer, ClockedConsumer, ReplayClock
from workers.shadow.worker import ShadowOutput, replayed, warm_context


def live_folder(
    name: str | None, registry: Path | None, settings: WorkerSettings
) -> tuple[Path, Path]:
    """(live model folder, registry folder). Without `--live`, the live version is what a worker
    with these settings serves: the registry's ACTIVE (or highest) version when a registry is
    configured, else PRECAST_MODEL__PATH."""
    reg = registry or settings.model.registry
    if name:
        return model_folder(name, reg or DEFAULT_MODEL_DIR.parent), reg or DEFAULT_MODEL_DIR.parent
    if reg is None:
        return settings.model.path, settings.model.path.parent
    version = wanted_version(reg)
    if version is None:
        raise ConfigError(f"model registry {reg} holds no model version; pass --live")
    return reg / version, reg


def model_folder(name: str, registry: Path) -> Path:
    """A registry version name (`1.1.0`) or a model folder path."""
    p = Path(name)
    return p if ("/" in name or p.is_dir()) else registry / name


def load_model(folder: Path, role: str, settings: WorkerSettings) -> ModelSession:
    if not (folder / "model.onnx").is_file() or not (folder / "manifest.json").is_file():
        raise ConfigError(
            f"{role} model not found: {folder} needs model.onnx and manifest.json (docs/models.md)"
        )
    m = settings.model
    try:
        return ModelSession(
            folder,
            fleet=load_fleet(settings.fleet.spec),
            provider=m.provider,
            device_id=m.device_id,
            intra_op_threads=m.intra_op_threads,
            allow_spinning=m.allow_spinning,
            warmup_rows=max(1, m.warmup_rows),  # the warm-up run proves the input shape fits
        )
    except ConfigError as exc:  # ONNX Runtime's own text may span lines: one line here
        raise ConfigError(f"{role} model {folder}: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are untyped
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(
            f"{role} model {folder} cannot run on this worker's features: {text}"
        ) from None


# -- the run ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ShadowArgs:
    live: Path
    candidate: Path
    assignment: list[TopicPartitionOffset]
    stop_at: dict[tuple[str, int], int]
    summary: Path
    checkpoint: Path | None
    job: str
    fresh: bool
    all_triggers: bool
    truth: tuple[int, int, float] | None  # (devices, seed, drift share) of the simulated fleet
    truth_file: Path | None  # resolved work orders of the range ({"windows": {device: [...]}})
    progress: bool
    checkpoint_s: float = 5.0
    # (topic, partition) -> (start, end): work orders and alarms before the range, for context
    warmup: dict[tuple[str, int], tuple[int, int]] = dataclasses.field(default_factory=dict)


def run(settings: WorkerSettings, a: ShadowArgs) -> int:
    cp = Checkpointer(a.checkpoint, a.job, a.checkpoint_s) if a.checkpoint else None
    state = None if (cp is None or a.fresh) else cp.load()
    # Candidate first: a bad candidate is the likeliest mistake, and it fails before any work.
    candidate = load_model(a.candidate, "candidate", settings)
    live = load_model(a.live, "live", settings)
    if state is not None and state.get("complete"):
        print("shadow: this run completed before; its summary stands", file=sys.stderr)
        _write_summary(a.summary, state["summary"])
        return 0
    fleet = load_fleet(settings.fleet.spec)
    comparison = Comparison(live.labels, groups=(*fleet.spec.board.filters, "trigger"))
    if state is None:
        starts, stop_at = a.assignment, a.stop_at
        assignment, resumes = starts, 0
        if cp is not None:
            cp.write(
                {
                    "ends": [[t, p, e] for (t, p), e in stop_at.items()],
                    "starts": [[x.topic, x.partition, x.offset] for x in starts],
                    "next": [[x.topic, x.partition, x.offset] for x in starts],
                    "comparison": comparison.to_dict(),
                    "complete": False,
                    "resumes": 0,
                }
            )
    else:  # the first run's ranges, from where the last checkpoint stands
        assert cp is not None
        stop_at = {(t, p): e for t, p, e in state["ends"]}
        starts = [TopicPartitionOffset(t, p, o) for t, p, o in state["starts"]]
        assignment = [TopicPartitionOffset(t, p, o) for t, p, o in state["next"]]
        comparison = Comparison.from_dict(state["comparison"])
        resumes = int(state.get("resumes", 0)) + 1
        cp.state = {**state, "resumes": resumes}
    total = sum(stop_at[(x.topic, x.partition)] - x.offset for x in starts)
    already = sum(x.offset for x in assignment) - sum(x.offset for x in starts)

    truth = (
        _truth(fleet, a.truth, live.labels)
        if a.truth_file is None
        else _outcomes(a.truth_file, live.labels)
    )
    clock = ReplayClock()

    def shadow_output(parts: LoopParts) -> ShadowOutput:
        return ShadowOutput(parts, live, candidate, comparison, truth, cp, assignment)

    model = settings.model.model_copy(update={"path": a.live, "registry": None})
    worker = build(
        settings.model_copy(update={"model": model}),
        clock=clock,  # the policy decides on the records' own clock, as it did at the time
        make_output=shadow_output,
        wrap_consumer=lambda consumer: ClockedConsumer(consumer, clock),
        reader="shadow",  # its rejections counted apart from the worker's
    )
    output = worker.output
    assert isinstance(output, ShadowOutput)
    worker.registry.current = live
    worker.assignment, worker.stop_at = assignment, stop_at
    worker._first_end = min(stop_at.values(), default=0)
    cfg = worker.pipeline.cfg
    worker.pipeline.cfg = dataclasses.replace(
        cfg, policy=dataclasses.replace(cfg.policy, always=a.all_triggers)
    )
    warm = dict(a.warmup)
    if resumes:  # the device table was not saved: fold in what the range held before `next`
        warm.update(
            {
                (x.topic, x.partition): (x.offset, n.offset)
                for x, n in zip(starts, assignment, strict=True)
            }
        )
    folded = warm_context(worker, settings.topics.catalog(), warm)
    if folded:
        print(
            f"shadow: context from {folded:,} work orders and alarms before the range",
            file=sys.stderr,
        )
    resumed = f" (resumed: {total - already:,} to go)" if resumes else ""
    print(
        f"shadow: {total:,} records through live {live.version} and candidate "
        f"{candidate.version}{resumed}",
        file=sys.stderr,
        flush=True,
    )
    pb = bar(total, "shadow", enabled=a.progress)
    pb.update(already)
    done = 0
    tune_gc()
    t0 = time.monotonic()
    try:
        worker.start()
        while worker.running and not worker.finished():
            worker.step()
            now_done = replayed(worker)
            pb.update(now_done - done)
            done = now_done
        worker.drain()
        worker.sink.producer.flush()
    finally:
        pb.close()
        worker.close()
    elapsed = time.monotonic() - t0
    comparison.events = already + done
    summary = {
        "live": _describe(live, a.live),
        "candidate": _describe(candidate, a.candidate),
        "shadow_topic": output.shadow_topic,
        "policy": "every trigger" if a.all_triggers else "live policy on record time",
        "ranges": [
            [x.topic, x.partition, x.offset, stop_at[(x.topic, x.partition)]] for x in starts
        ],
        "records": total,
        "elapsed_s": elapsed,
        "records_per_s": done / elapsed if elapsed > 0 else None,
        "resumes": resumes,
        "truth": (
            {"devices": a.truth[0], "seed": a.truth[1], "drift_share": a.truth[2]}
            if a.truth
            else {"outcomes": str(a.truth_file), "devices": len(truth or {})}
            if a.truth_file
            else None
        ),
        "comparison": comparison.to_dict(),
    }
    if cp is not None:
        cp.write({**(cp.state or {}), "complete": True, "summary": summary})
    _write_summary(a.summary, summary)
    return 0


def _write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, path)


def _describe(model: ModelSession, folder: Path) -> dict[str, Any]:
    return {"name": model.manifest.name, "version": model.version, "path": str(folder)}


ALWAYS = (-(1 << 62), 1 << 62)


def _truth(
    fleet: Fleet, spec: tuple[int, int, float] | None, labels: Sequence[str]
) -> dict[str, list[tuple[int, int, int]]] | None:
    if spec is None:
        return None
    devices, seed, drift = spec
    return {
        d: [(labels.index(s), *ALWAYS)]
        for d, s in true_labels(fleet.spec, devices, seed, drift_share=drift).items()
        if s is not None and s in labels
    }


def _outcomes(path: Path, labels: Sequence[str]) -> dict[str, list[tuple[int, int, int]]]:
    """The resolved work orders `precast shadow --truth outcomes` found in the range: a
    device's predictions between an open and its resolution are scored against the
    resolution."""
    try:
        doc = json.loads(path.read_text())
        windows = doc["windows"]
        return {
            str(d): [(labels.index(lab), int(a), int(b)) for lab, a, b in ws if lab in labels]
            for d, ws in windows.items()
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"unreadable outcomes truth {path}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m workers.shadow.run", description=__doc__.splitlines()[0])
    p.add_argument("--candidate", required=True, help="registry version (e.g. 1.1.0) or folder")
    p.add_argument(
        "--live", help="registry version or folder (default: what a worker would serve now)"
    )
    p.add_argument("--registry", type=Path, help="model registry folder")
    p.add_argument("--ranges", required=True, help='{"topic": [[partition, start, end], ...]}')
    p.add_argument(
        "--warmup",
        default="{}",
        help="work-order/alarm ranges before the range, folded into context: same form as --ranges",
    )
    p.add_argument("--summary", required=True, type=Path, help="JSON summary file to write")
    p.add_argument("--checkpoint", type=Path, help="checkpoint file (resume with the same one)")
    p.add_argument("--job", default="", help="identity of the run the checkpoint belongs to")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--all-triggers", action="store_true", help="predict every trigger (no skip)")
    p.add_argument("--truth", help="DEVICES:SEED[:DRIFT_SHARE] of the simulated fleet")
    p.add_argument(
        "--truth-file", type=Path, help="resolved work orders of the range (JSON), as truth"
    )
    p.add_argument(
        "--checkpoint-every", type=float, default=5.0, metavar="S", help="seconds between saves"
    )
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    def body() -> int:
        settings = load(
            WorkerSettings,
            worker={"group_id": f"precast-shadow-{uuid.uuid4().hex[:8]}"},
        )
        setup_logging(settings.log_level)
        live, registry = live_folder(args.live, args.registry, settings)
        assignment, stop_at = parse_ranges(args.ranges)
        warm_start, warm_end = parse_ranges(args.warmup)
        sa = ShadowArgs(
            live=live,
            candidate=model_folder(args.candidate, registry),
            assignment=assignment,
            stop_at=stop_at,
            summary=args.summary,
            checkpoint=args.checkpoint,
            job=args.job,
            fresh=args.fresh,
            all_triggers=args.all_triggers,
            truth=parse_truth(args.truth) if args.truth else None,
            truth_file=args.truth_file,
            progress=not args.no_progress,
            checkpoint_s=max(0.05, args.checkpoint_every),
            warmup={
                (t.topic, t.partition): (t.offset, warm_end[(t.topic, t.partition)])
                for t in warm_start
            },
        )
        Admin(settings.kafka).wait_reachable()
        return run(settings, sa)

    return run_cli("precast shadow", body)


def parse_truth(text: str) -> tuple[int, int, float]:
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        devices, seed = int(parts[0]), int(parts[1])
        drift = float(parts[2]) if len(parts) == 3 else 0.05
        if devices <= 0 or not 0 <= drift <= 1:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"malformed --truth {text!r}: expected DEVICES:SEED[:DRIFT_SHARE], e.g. 2000:7"
        ) from None
    return devices, seed, drift


if __name__ == "__main__":
    sys.exit(main())
