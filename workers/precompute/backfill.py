"""`python -m workers.precompute.backfill --model DIR --ranges JSON`: run bounded offset ranges of the
event topics through one model version into the predictions topic, every output marked as a
backfill (trigger "backfill", `backfill: true`, lineage to the input records). A backfill ranks
below a live answer computed from the same data (schemas.predictions.order_key); with
`--outrank-live` its records say `backfill: false` and rank like live answers.

`precast backfill` resolves time ranges to offsets and runs this (precast never imports the
workers package). The run uses a consumer group of its own, deleted at the end, so the live
workers' committed offsets are never touched; every device with input in the range gets a
prediction (no skip, no throttle); the model is fixed (no registry hot swap mid-run).
`--ranges` is `{"topic": [[partition, start, end], ...], ...}`, ends exclusive.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import uuid

from prometheus_client import REGISTRY

from precast.errors import ConfigError
from precast.kafka import Admin, TopicPartitionOffset
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.progress import bar
from workers.precompute.cli import build
from workers.precompute.loop import Worker
from workers.precompute.outputs import PredictionOutput
from workers.precompute.score.encode import backfill_outranks_live
from workers.settings import WorkerSettings


def parse_ranges(text: str) -> tuple[list[TopicPartitionOffset], dict[tuple[str, int], int]]:
    try:
        raw = json.loads(text)
        items = [(str(t), int(p), int(s), int(e)) for t, parts in raw.items() for p, s, e in parts]
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f'malformed --ranges: {exc} (expected {{"topic": [[partition, start, end]]}})'
        ) from None
    bad = [i for i in items if i[2] < 0 or i[3] < i[2]]
    if bad:
        raise ConfigError(
            f"reversed or negative range {bad[0][0]}[{bad[0][1]}] {bad[0][2]}-{bad[0][3]}"
        )
    live = [i for i in items if i[3] > i[2]]
    return (
        [TopicPartitionOffset(t, p, s) for t, p, s, _e in live],
        {(t, p): e for t, p, _s, e in live},
    )


def prepare(
    worker: Worker, assignment: list[TopicPartitionOffset], stop_at: dict[tuple[str, int], int]
) -> None:
    """Turn a live worker into a bounded backfill run (see `Worker`'s assignment/stop_at)."""
    cfg = worker.pipeline.cfg
    worker.pipeline.cfg = dataclasses.replace(
        cfg, backfill=True, policy=dataclasses.replace(cfg.policy, always=True)
    )
    worker.assignment, worker.stop_at = assignment, stop_at
    # A backfill recomputes a past range: its state must not overwrite the live workers'.
    assert isinstance(worker.output, PredictionOutput)
    worker.output.write_state = False


def run(
    settings: WorkerSettings,
    assignment: list[TopicPartitionOffset],
    stop_at: dict[tuple[str, int], int],
    progress: bool,
) -> int:
    worker = build(settings)
    prepare(worker, assignment, stop_at)
    version = worker.registry.current.version
    total = sum(stop_at[(a.topic, a.partition)] - a.offset for a in assignment)
    print(f"backfill: {total:,} records through model {version}", file=sys.stderr, flush=True)
    before = (
        REGISTRY.get_sample_value("precast_worker_predictions_total", {"model_version": version})
        or 0.0
    )
    t0 = time.monotonic()
    pb = bar(total, "backfill", enabled=progress)
    done = 0
    try:
        worker.start()
        while worker.running and not worker.finished():
            worker.step()
            now_done = sum(
                min(
                    worker.pipeline.positions.get((a.topic, a.partition), a.offset),
                    stop_at[(a.topic, a.partition)],
                )
                - a.offset
                for a in assignment
            )
            pb.update(now_done - done)
            done = now_done
        worker.drain()
        worker.commit(sync=True)
    finally:
        pb.close()
        worker.close()
        Admin(settings.kafka).delete_consumer_groups([settings.worker.group_id])
    made = (
        REGISTRY.get_sample_value("precast_worker_predictions_total", {"model_version": version})
        or 0.0
    ) - before
    print(
        f"backfill: read {done:,} records, published {int(made):,} predictions of model {version} marked backfill "
        f"in {time.monotonic() - t0:.1f}s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(
        prog="python -m workers.precompute.backfill", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--model", required=True, help="model folder (model.onnx + manifest.json) to run"
    )
    p.add_argument(
        "--ranges", required=True, help='{"topic": [[partition, start, end], ...]} (ends exclusive)'
    )
    p.add_argument(
        "--outrank-live",
        action="store_true",
        help="rank the outputs like live answers (they then replace live answers of the same data)",
    )
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    def body() -> int:
        assignment, stop_at = parse_ranges(args.ranges)
        backfill_outranks_live(args.outrank_live)
        settings = load(
            WorkerSettings,
            model={"path": args.model, "registry": None},
            worker={"group_id": f"precast-backfill-{uuid.uuid4().hex[:8]}"},
        )
        setup_logging(settings.log_level)
        if not assignment:
            print("backfill: the ranges hold no records; nothing to do")
            return 0
        return run(settings, assignment, stop_at, not args.no_progress)

    return run_cli("precast-worker backfill", body)


if __name__ == "__main__":
    sys.exit(main())
