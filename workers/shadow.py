"""`python -m workers.shadow --candidate VERSION --ranges JSON --summary FILE`: run bounded
offset ranges of the event topics through the live model and a candidate model side by side,
with one worker pipeline (decode, speculation policy, context, features): every batch's feature
rows go through both models. The candidate's PredictionSets go to the shadow topic; nothing
goes to the predictions topic, the dead-letter topic or the serving store. What differs is
accumulated in `workers.shadow_compare.Comparison` and written to the summary file, which
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

import numpy as np
import orjson

from precast.errors import ConfigError
from precast.kafka import Admin, KafkaMessage, TopicPartitionOffset
from precast.progress import bar
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from schemas.fleet import DEVICE_TYPES, true_strategies
from workers.backfill import parse_ranges
from workers.cli import build
from workers.decode import decode_events
from workers.encode import Pending
from workers.inference import ModelSession
from workers.loop import Worker, tune_gc
from workers.policy import TRIGGER
from workers.registry import wanted_version
from workers.settings import DEFAULT_MODEL_DIR, WorkerSettings
from workers.shadow_compare import Comparison
from workers.wire import traceparent

CHECKPOINT_FORMAT = 1
_TYPE_COLUMNS = slice(7, 7 + len(DEVICE_TYPES))  # one-hot device type in the feature row


class ReplayClock:
    """The newest record timestamp consumed so far: the policy's "now" during a shadow run."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


class ClockedConsumer:
    """The worker's consumer, advancing a `ReplayClock` with every batch it returns."""

    def __init__(self, consumer: Any, clock: ReplayClock) -> None:
        self._c, self._clock = consumer, clock

    def consume(self, n: int, timeout: float) -> list[KafkaMessage]:
        return self._advance(self._c.consume(n, timeout))

    def consume_available(self, n: int, timeout: float) -> list[KafkaMessage]:
        return self._advance(self._c.consume_available(n, timeout))

    def _advance(self, msgs: list[KafkaMessage]) -> list[KafkaMessage]:
        if msgs:
            newest = max(m.timestamp()[1] for m in msgs)
            if newest > self._clock.ms:
                self._clock.ms = newest
        return msgs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


class HeldRecord:
    """What a shadow run keeps of an input record while its device waits out a throttle
    window: where it came from and its trace id, for the lineage and the checkpoint offsets;
    not its payload or its other headers. A waiting device holds up to LINEAGE_MAX inputs, and
    a replay of records produced faster than the throttle window (any backfilled or benchmark
    topic) keeps nearly every device waiting: as whole KafkaMessages (~700 B each with payload
    and headers) that heap grew with the range (65 -> 100 MiB from 200k to 800k events of the
    same 40k devices) toward devices x LINEAGE_MAX x 700 B. Satisfies `KafkaMessage` for what
    the pipeline asks of a reference (topic, partition, offset, headers). Not a
    `precast.kafka.Record`: that one keeps a key, a value, a headers list and a timestamp per
    instance, which is most of what this class exists to drop."""

    __slots__ = ("topic_", "partition_", "offset_", "trace_")

    def __init__(self, topic: str, partition: int, offset: int, trace: bytes | None) -> None:
        self.topic_, self.partition_, self.offset_, self.trace_ = topic, partition, offset, trace

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> None:
        return None

    def value(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return [] if self.trace_ is None else [("traceparent", self.trace_)]

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)  # TIMESTAMP_NOT_AVAILABLE


def slim(item: Pending, topics: dict[str, str], sites: dict[str, str], heartbeats: str) -> None:
    """Replace the whole records a deferred item holds by `HeldRecord`s, in place; the
    device's site is read first from its heartbeat if not known yet (the payload goes).
    `topics` interns topic names (each consumed message carries its own copy)."""
    refs = item.refs
    for i, (m, eid) in enumerate(refs):
        if type(m) is HeldRecord:
            continue
        t = m.topic() or ""
        if item.device not in sites and t == heartbeats:
            sites[item.device] = site_of(m.value())
        refs[i] = (
            HeldRecord(
                topics.setdefault(t, t), m.partition() or 0, m.offset() or 0, traceparent(m)
            ),
            eid,
        )


class Recording:
    """A model whose last call's scores and duration are kept (the pipeline's `compute` runs the
    candidate; the comparison needs its full score rows, not only the top-3)."""

    def __init__(self, model: ModelSession) -> None:
        self.model, self.version, self.labels = model, model.version, model.labels
        self.last = np.zeros((0, len(model.labels)), dtype=np.float32)
        self.seconds = 0.0

    def predict(self, features: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        self.last = self.model.predict(features)
        self.seconds = time.perf_counter() - t0
        return self.last


class ShadowWorker(Worker):
    """A bounded worker run whose batches go through two models; see the module doc."""

    def setup(
        self,
        candidate: ModelSession,
        comparison: Comparison,
        truth: dict[str, int] | None,
        checkpoint: Checkpointer | None,
    ) -> None:
        live = self.registry.current
        if set(candidate.labels) != set(live.labels):
            raise ConfigError(
                f"candidate {candidate.version} names strategies {list(candidate.labels)}, "
                f"live {live.version} names {list(live.labels)}: nothing to compare"
            )
        self.candidate = Recording(candidate)
        # candidate column -> live column, so both score rows speak the live model's order
        self.to_live = np.array([live.labels.index(lab) for lab in candidate.labels])
        self.comparison, self.truth, self.checkpointer = comparison, truth, checkpoint
        self.sites: dict[str, str] = {}
        self.shadow_topic = self.topics.shadow_predictions.name
        self.failed: str | None = None
        names: dict[str, str] = {}
        hb = self.topics.heartbeats.name
        self.pipeline.on_defer = lambda item: slim(item, names, self.sites, hb)

    # -- one batch through both models ----------------------------------------------------------
    def _run_batch(self, items: list, delay: float) -> None:
        live = self.registry.current
        event_ms = self.clock()
        try:
            result = self.pipeline.compute(items, self.candidate, time.time_ns() // 1_000_000)
        except Exception as exc:  # noqa: BLE001 - any candidate failure ends the run the same way
            raise ConfigError(
                f"candidate model {self.candidate.version} failed on a batch of {len(items)}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        cand = self.candidate.last[:, np.argsort(self.to_live)]
        t0 = time.perf_counter()
        live_scores = live.predict(result.features)
        live_s = time.perf_counter() - t0
        self.sink.produce(self.shadow_topic, result.out.keys, result.out.values)
        self.pipeline.mark_predicted(result, event_ms)
        self.batches += 1
        c = self.comparison
        c.time("live", len(items), live_s)
        c.time("candidate", len(items), self.candidate.seconds)
        devices = [it.device for it in items]
        c.add(
            devices,
            {
                "device_type": _device_types(result.features),
                "site": [self._site(it) for it in items],
                "trigger": [TRIGGER[it.reason] for it in items],
            },
            live_scores,
            cand,
            [self.truth.get(d, -1) for d in devices] if self.truth is not None else None,
        )

    def _site(self, item: Pending) -> str:
        site = self.sites.get(item.device)
        if site is None:
            hb = self.topics.heartbeats.name
            for m, _ in item.refs:  # a slimmed (HeldRecord) reference has no payload left
                if m.topic() == hb and (value := m.value()) is not None:
                    site = self.sites[item.device] = site_of(value)
                    break
        return site or "unknown"

    def _reject(self, msg: KafkaMessage, reason: str, detail: str) -> None:
        # The live worker dead-lettered these already; a shadow run only counts them.
        self.comparison.reject(reason)

    # -- checkpoints instead of group commits --------------------------------------------------
    def commit(self, sync: bool = False, rewind: bool = True) -> None:
        self._next_commit = time.monotonic() + self.cfg.commit_interval_s
        cp = self.checkpointer
        if not sync and (cp is None or not cp.due()):
            return
        self.drain()  # nothing may wait past a checkpoint: its records would be read twice
        self.sink.producer.flush()  # raises unless every shadow output so far is acknowledged
        if cp is not None:
            cp.save(self, complete=False)

    def done(self) -> int:
        """Records of the ranges behind the current positions."""
        pos = self.pipeline.positions
        return sum(
            min(pos.get((a.topic, a.partition), a.offset), self.stop_at[(a.topic, a.partition)])
            - a.offset
            for a in self.assignment or ()
        )


def site_of(value: bytes | None) -> str:
    """The site a heartbeat names, in any tolerated metadata layout (`meta.info`, flat under
    `meta`, or under a version key such as `meta.info.v2`; see schemas.normalize): read once
    per device, so a plain JSON parse instead of the full contract validation."""
    try:
        meta = orjson.loads(value or b"{}").get("meta")
    except (orjson.JSONDecodeError, AttributeError):
        return "unknown"
    if not isinstance(meta, dict):
        return "unknown"
    info = meta.get("info", meta)
    if isinstance(info, dict) and "site" not in info:
        info = next((v for k, v in info.items() if k[:1] == "v" and isinstance(v, dict)), info)
    site = info.get("site") if isinstance(info, dict) else None
    return site if isinstance(site, str) and site else "unknown"


def _device_types(x: np.ndarray) -> list[str]:
    onehot = x[:, _TYPE_COLUMNS]
    idx = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).tolist()
    return [DEVICE_TYPES[i] if i >= 0 else "unknown" for i in idx]


class Checkpointer:
    """Where the run stands: per partition the next offset, the comparison so far, and the
    ranges the first run resolved. Saved atomically (temp file, fsync, rename)."""

    def __init__(self, path: Path, job: str, every_s: float) -> None:
        self.path, self.job, self.every_s = path, job, every_s
        self._next = time.monotonic() + every_s
        self.state: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"unreadable checkpoint {self.path}: {exc}; move it away or pass --fresh"
            ) from None
        if raw.get("format") != CHECKPOINT_FORMAT or raw.get("job") != self.job:
            raise ConfigError(
                f"checkpoint {self.path} belongs to another shadow run; use --fresh to start over"
            )
        self.state = raw
        return raw

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def save(self, worker: ShadowWorker, complete: bool) -> None:
        self._next = time.monotonic() + self.every_s
        pos = worker.pipeline.positions
        state = dict(self.state or {})
        state["next"] = [
            [a.topic, a.partition, pos.get((a.topic, a.partition), a.offset)]
            for a in worker.assignment or ()
        ]
        state["comparison"] = worker.comparison.to_dict()
        state["complete"] = complete
        self.write(state)

    def write(self, state: dict[str, Any]) -> None:
        state.update(format=CHECKPOINT_FORMAT, job=self.job, updated_at_ms=int(time.time() * 1000))
        self.state = state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


# -- context as it was at the range's start ------------------------------------------------------
def warm_context(worker: ShadowWorker, ranges: dict[tuple[str, int], tuple[int, int]]) -> int:
    """Fold the work orders and alarms of `ranges` ({(topic, partition): (start, end)}, before
    the shadow range) into the device table's context, predicting nothing: the live workers had
    that context when the range's events arrived. Returns the records folded in."""
    roles = {worker.topics.work_orders.name: "work_orders", worker.topics.alarms.name: "alarms"}
    todo = {tp: se for tp, se in ranges.items() if tp[0] in roles and se[1] > se[0]}
    if not todo:
        return 0
    c = worker.consumer
    c.assign([TopicPartitionOffset(t, p, s) for (t, p), (s, _e) in todo.items()])
    tab, n = worker.pipeline.table, 0
    idle_until = time.monotonic() + 10.0  # past trailing transaction markers nothing arrives
    while todo and time.monotonic() < idle_until:
        msgs = c.consume(5_000, 0.2)
        if msgs:
            idle_until = time.monotonic() + 10.0
        by_role: dict[str, list[KafkaMessage]] = {}
        for m in msgs:
            tp, off = (m.topic(), m.partition()), m.offset()
            if tp not in todo or off is None:
                continue
            if off < todo[tp][1]:
                by_role.setdefault(roles[tp[0]], []).append(m)
            if off >= todo[tp][1] - 1:
                del todo[tp]
        for role, batch in by_role.items():
            for m, e in decode_events(role, batch, _ignore):
                tab.slots([e["device_id"]], [int(m.partition() or 0)])
                ctx = tab.context(e["device_id"])
                if role == "work_orders":
                    ctx.apply_work_order(e)
                else:
                    ctx.apply_alarm(e)
                n += 1
    return n  # worker.start() assigns the shadow range in place of these


def _ignore(msg: KafkaMessage, reason: str, detail: str) -> None:
    """Bad records before the range: the live worker dead-lettered them; nothing to count."""


# -- models -------------------------------------------------------------------------------------
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
    comparison = Comparison(live.labels)
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

    model = settings.model.model_copy(update={"path": a.live, "registry": None})
    worker = build(settings.model_copy(update={"model": model}), ShadowWorker)
    assert isinstance(worker, ShadowWorker)
    worker.registry.current = live
    worker.assignment, worker.stop_at = assignment, stop_at
    worker._first_end = min(stop_at.values(), default=0)
    cfg = worker.pipeline.cfg
    worker.pipeline.cfg = dataclasses.replace(
        cfg, policy=dataclasses.replace(cfg.policy, always=a.all_triggers)
    )
    clock = ReplayClock()
    worker.clock = clock
    worker.consumer = ClockedConsumer(worker.consumer, clock)  # type: ignore[assignment]
    worker.setup(candidate, comparison, _truth(a.truth, live.labels), cp)
    warm = dict(a.warmup)
    if resumes:  # the device table was not saved: fold in what the range held before `next`
        warm.update(
            {
                (x.topic, x.partition): (x.offset, n.offset)
                for x, n in zip(starts, assignment, strict=True)
            }
        )
    folded = warm_context(worker, warm)
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
            now_done = worker.done()
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
        "shadow_topic": worker.shadow_topic,
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


def _truth(spec: tuple[int, int, float] | None, labels: Sequence[str]) -> dict[str, int] | None:
    if spec is None:
        return None
    devices, seed, drift = spec
    return {
        d: labels.index(s)
        for d, s in true_strategies(devices, seed, drift_share=drift).items()
        if s is not None and s in labels
    }


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m workers.shadow", description=__doc__.splitlines()[0])
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
