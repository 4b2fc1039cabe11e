"""The shadow run's output: a bounded `Worker` run whose every batch goes through the live model
and a candidate (`ShadowOutput`, plugged into the loop's `Output` seam), and the context warm-up
before a range is replayed."""

from __future__ import annotations

import time

import numpy as np

from precast.errors import ConfigError
from precast.kafka import KafkaMessage, TopicPartitionOffset
from schemas.spec.fields import Categorical
from schemas.topics import Topics
from workers.model.inference import ModelSession
from workers.model.predictor import Predictor
from workers.precompute.assembly import LoopParts
from workers.precompute.items import TRIGGER, Pending
from workers.precompute.loop import Worker
from workers.precompute.outputs import drain
from workers.shadow.compare import Comparison
from workers.shadow.replay import Checkpointer, slim


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


class ShadowOutput:
    """The shadow run's output (the loop's `Output` seam): every batch goes through the live
    model and the candidate, the candidate's answers go to the shadow topic and the difference
    into `comparison`; rejected records are only counted (the live worker dead-lettered them);
    a commit is a checkpoint. Given the loop's parts, the live model, the candidate, the
    comparison, the truth (None: none known), the checkpointer, and the ranges it replays."""

    def __init__(
        self,
        parts: LoopParts,
        live: Predictor,
        candidate: ModelSession,
        comparison: Comparison,
        truth: dict[str, list[tuple[int, int, int]]] | None,
        checkpoint: Checkpointer | None,
        assignment: list[TopicPartitionOffset],
    ) -> None:
        if set(candidate.labels) != set(live.labels):
            raise ConfigError(
                f"candidate {candidate.version} names strategies {list(candidate.labels)}, "
                f"live {live.version} names {list(live.labels)}: nothing to compare"
            )
        self.pipeline, self.registry, self.sink = parts.pipeline, parts.registry, parts.sink
        self.cfg, self.clock, self.assignment = parts.cfg, parts.clock, assignment
        self.candidate = Recording(candidate)
        # candidate column -> live column, so both score rows speak the live model's order
        self.to_live = np.array([live.labels.index(lab) for lab in candidate.labels])
        self.comparison, self.truth, self.checkpointer = comparison, truth, checkpoint
        self._facets()
        self.attrs: dict[str, dict[str, str]] = {}
        self.shadow_topic = parts.topics.shadow_predictions.name
        self.heartbeat_topic = hb = parts.topics.heartbeats.name
        self.batches = 0
        self.next_commit = time.monotonic() + self.cfg.commit_interval_s
        names: dict[str, str] = {}
        self.pipeline.on_defer = lambda item: slim(item, names, self.attrs, hb, self._read)

    def _facets(self) -> None:
        """What the comparison groups by besides the trigger (the spec's board filters): a
        one-hot feature's category is read back from the feature row, anything else from the
        device's heartbeat, once per device."""
        fleet = self.pipeline.fleet
        spec, names = fleet.spec, fleet.features.names
        self.onehot: dict[str, tuple[int, tuple[str, ...]]] = {}
        for f in spec.features:
            field = spec.field(f.source)
            if f.transform == "one_hot" and isinstance(field, Categorical):
                self.onehot.setdefault(
                    f.source, (names.index(f"{f.name}={field.values[0]}"), field.values)
                )
        self.payload = tuple(
            g for g in self.comparison.groups if g not in self.onehot and g != "trigger"
        )

    def _read(self, value: bytes | None) -> dict[str, str]:
        """The payload facets of one heartbeat (unknown where it has none or is bad)."""
        got = self.pipeline.fleet.validator.validate("heartbeats", b"x", value)
        e = got.event if got.ok else {}
        return {g: str(e.get(g) or "unknown") for g in self.payload}

    # -- one batch through both models ----------------------------------------------------------
    def run_batch(self, items: list[Pending], delay: float, latency: bool = True) -> bool:
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
        groups: dict[str, list[str]] = {"trigger": [TRIGGER[it.reason] for it in items]}
        for g, (start, values) in self.onehot.items():
            groups[g] = _categories(result.features[:, start : start + len(values)], values)
        if self.payload:
            attrs = [self._attrs(it) for it in items]
            for g in self.payload:
                groups[g] = [a[g] for a in attrs]
        c.add(
            devices,
            groups,
            live_scores,
            cand,
            self._truth_of(devices, result.computed_at) if self.truth is not None else None,
        )
        return True

    def _truth_of(self, devices: list[str], at: np.ndarray) -> list[int]:
        """Each row's right label, -1 where none is known: a truth holds for a device over a
        time window (a resolved work order: from its open to its resolution; the simulator's
        truth: always)."""
        assert self.truth is not None
        out = []
        for d, t in zip(devices, at.tolist(), strict=True):
            label = -1
            for idx, start, end in self.truth.get(d, ()):
                if start <= t <= end:
                    label = idx
            out.append(label)
        return out

    def _attrs(self, item: Pending) -> dict[str, str]:
        got = self.attrs.get(item.device)
        if got is None:
            hb = self.heartbeat_topic
            for m, _ in item.refs:  # a slimmed (HeldRecord) reference has no payload left
                if m.topic() == hb and (value := m.value()) is not None:
                    got = self.attrs[item.device] = self._read(value)
                    break
        return got or dict.fromkeys(self.payload, "unknown")

    def reject(self, msg: KafkaMessage, reason: str, detail: str) -> None:
        # The live worker dead-lettered these already; a shadow run only counts them.
        self.comparison.reject(reason)

    def discard(self) -> None:
        """Nothing waits to be committed: a shadow run reads fixed ranges, never loses them."""

    # -- checkpoints instead of group commits --------------------------------------------------
    def commit(self, sync: bool = False, rewind: bool = True) -> None:
        self.next_commit = time.monotonic() + self.cfg.commit_interval_s
        cp = self.checkpointer
        if not sync and (cp is None or not cp.due()):
            return
        # nothing may wait past a checkpoint: its records would be read twice
        drain(self.pipeline, self.registry, self.clock, self.run_batch)
        self.sink.producer.flush()  # raises unless every shadow output so far is acknowledged
        if cp is not None:
            cp.save(self.pipeline.positions, self.assignment, self.comparison.to_dict(), False)


def replayed(worker: Worker) -> int:
    """Records of the worker's ranges behind its current positions."""
    pos = worker.pipeline.positions
    return sum(
        min(pos.get((a.topic, a.partition), a.offset), worker.stop_at[(a.topic, a.partition)])
        - a.offset
        for a in worker.assignment or ()
    )


def _categories(onehot: np.ndarray, values: tuple[str, ...]) -> list[str]:
    idx = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).tolist()
    return [values[i] if i >= 0 else "unknown" for i in idx]


def warm_context(
    worker: Worker, topics: Topics, ranges: dict[tuple[str, int], tuple[int, int]]
) -> int:
    """Fold the work orders and alarms of `ranges` ({(topic, partition): (start, end)}, before
    the shadow range) into the device table's context, predicting nothing: the live workers had
    that context when the range's events arrived. Returns the records folded in."""
    roles = {
        topics.work_orders.name: topics.work_orders.role,
        topics.alarms.name: topics.alarms.role,
    }
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
        pipe = worker.pipeline
        for role, batch in by_role.items():
            for m, e in pipe.decoder.events(role, batch, _ignore):
                try:
                    tab.slots([e["device_id"]], [int(m.partition() or 0)])
                    pipe.fleet.context.apply(tab.context(e["device_id"]), pipe.stream_of[role], e)
                except Exception as exc:  # noqa: BLE001 - the run's guard (precast.guard)
                    pipe.guard.reject(exc, m, dead_letter=False)
                    continue
                n += 1
    return n  # worker.start() assigns the shadow range in place of these


def _ignore(msg: KafkaMessage, reason: str, detail: str) -> None:
    """Bad records before the range: the live worker dead-lettered them; nothing to count."""


# -- models -------------------------------------------------------------------------------------
