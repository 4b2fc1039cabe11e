"""What a shadow run learns, batch by batch: how the candidate model's answers differ from the
live model's on the same feature rows. Pure numpy and plain dicts; memory grows with the number
of devices and groups, never with the number of events (a 10M-event range costs what 10k
costs). `to_dict`/`from_dict` carry it through a checkpoint and into the summary file that
`precast shadow` renders (opsctl.toolkit.shadow_report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workers.model.topk import top_k

# What a comparison is grouped by: the fleet spec's board filters, then the trigger.
GROUPS = ("device_type", "site", "trigger")
# Per-batch inference time buckets (seconds, upper bounds) for the median and p99.
TIME_BUCKETS: tuple[float, ...] = tuple(
    float(f"{m}e{e}") for e in range(-5, 1) for m in (1, 2, 5)
) + (float("inf"),)
CALIBRATION_BINS = 10
TOP_K = 3


@dataclass
class Tally:
    """Predictions compared, top-1 agreements, and the sum of top-3 overlaps (0..1 each)."""

    n: int = 0
    agree: int = 0
    overlap: float = 0.0

    def add(self, n: int, agree: int, overlap: float) -> None:
        self.n += n
        self.agree += agree
        self.overlap += overlap

    def as_dict(self) -> dict[str, Any]:
        return {
            "predictions": self.n,
            "top1_agreement": self.agree / self.n if self.n else None,
            "top3_overlap": self.overlap / self.n if self.n else None,
            "agree": self.agree,
            "overlap_sum": self.overlap,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tally:
        return cls(int(d["predictions"]), int(d["agree"]), float(d["overlap_sum"]))


@dataclass
class Timing:
    """Inference time of one model version, per batch."""

    batches: int = 0
    rows: int = 0
    seconds: float = 0.0
    max_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(TIME_BUCKETS))

    def add(self, rows: int, seconds: float) -> None:
        self.batches += 1
        self.rows += rows
        self.seconds += seconds
        self.max_s = max(self.max_s, seconds)
        self.buckets[int(np.searchsorted(TIME_BUCKETS, seconds))] += 1

    def quantile(self, q: float) -> float | None:
        """Upper bound of the bucket holding quantile q (the largest seen for the last one)."""
        if not self.batches:
            return None
        seen, want = 0, q * self.batches
        for bound, k in zip(TIME_BUCKETS, self.buckets, strict=True):
            seen += k
            if seen >= want:
                return min(bound, self.max_s)
        return self.max_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "rows": self.rows,
            "seconds": self.seconds,
            "ms_per_batch_mean": 1000 * self.seconds / self.batches if self.batches else None,
            "ms_per_batch_p50": _ms(self.quantile(0.5)),
            "ms_per_batch_p99": _ms(self.quantile(0.99)),
            "ms_per_batch_max": 1000 * self.max_s,
            "rows_per_s": self.rows / self.seconds if self.seconds > 0 else None,
            "buckets": self.buckets,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        return cls(
            int(d["batches"]),
            int(d["rows"]),
            float(d["seconds"]),
            float(d["ms_per_batch_max"]) / 1000,
            list(d["buckets"]),
        )


@dataclass
class Calibration:
    """Top-1 score against the ground truth: per score bin, predictions and correct ones."""

    n: list[int] = field(default_factory=lambda: [0] * CALIBRATION_BINS)
    correct: list[int] = field(default_factory=lambda: [0] * CALIBRATION_BINS)
    score: list[float] = field(default_factory=lambda: [0.0] * CALIBRATION_BINS)

    def add(self, top1_score: np.ndarray, right: np.ndarray) -> None:
        b = np.minimum((top1_score * CALIBRATION_BINS).astype(np.int64), CALIBRATION_BINS - 1)
        for i, v in enumerate(np.bincount(b, minlength=CALIBRATION_BINS).tolist()):
            self.n[i] += v
        for i, v in enumerate(np.bincount(b, weights=right, minlength=CALIBRATION_BINS).tolist()):
            self.correct[i] += int(round(v))
        for i, v in enumerate(
            np.bincount(b, weights=top1_score, minlength=CALIBRATION_BINS).tolist()
        ):
            self.score[i] += v

    def as_dict(self) -> dict[str, Any]:
        total = sum(self.n)
        bins = [
            {
                "from": i / CALIBRATION_BINS,
                "to": (i + 1) / CALIBRATION_BINS,
                "predictions": k,
                "mean_score": self.score[i] / k if k else None,
                "accuracy": self.correct[i] / k if k else None,
            }
            for i, k in enumerate(self.n)
        ]
        # Expected calibration error: how far stated confidence is from observed accuracy.
        ece = (
            sum(abs(self.correct[i] - self.score[i]) for i in range(CALIBRATION_BINS)) / total
            if total
            else None
        )
        return {
            "predictions": total,
            "accuracy": sum(self.correct) / total if total else None,
            "mean_score": sum(self.score) / total if total else None,
            "ece": ece,
            "bins": bins,
            "n": self.n,
            "correct": self.correct,
            "score": self.score,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        return cls(list(d["n"]), list(d["correct"]), list(d["score"]))


class Comparison:
    """Live vs candidate over a shadow run. `labels` is the live model's label order; candidate
    scores arrive already mapped into it."""

    def __init__(
        self, labels: Sequence[str], keep_changed: int = 50, groups: Sequence[str] = GROUPS
    ) -> None:
        self.labels = tuple(labels)
        self.keep_changed = keep_changed
        self.overall = Tally()
        self.groups: tuple[str, ...] = tuple(groups)
        self.by: dict[str, dict[str, Tally]] = {g: {} for g in self.groups}
        k = len(self.labels)
        self.transitions = np.zeros((k, k), dtype=np.int64)  # live top-1 -> candidate top-1
        self.changed: dict[str, dict[str, Any]] = {}  # device -> its largest top-1 change
        self.changed_devices: set[str] = set()
        self.timing = {"live": Timing(), "candidate": Timing()}
        self.calibration = {"live": Calibration(), "candidate": Calibration()}
        self.rejected: dict[str, int] = {}
        self.events = 0

    # -- accumulate -----------------------------------------------------------------------------
    def add(
        self,
        devices: Sequence[str],
        groups: Mapping[str, Sequence[str]],
        live: np.ndarray,
        candidate: np.ndarray,
        truth: Sequence[int] | None = None,
    ) -> None:
        """One batch: both models' scores (n, labels) for the same rows; `groups` gives each
        row's value of each group (the spec's board filters and the trigger); `truth` the right
        label index per row, -1 where unknown."""
        n = len(devices)
        if n == 0:
            return
        li, ls = top_k(live, TOP_K)
        ci, cs = top_k(candidate, TOP_K)
        agree = li[:, 0] == ci[:, 0]
        overlap = (li[:, :, None] == ci[:, None, :]).any(axis=2).sum(axis=1) / li.shape[1]
        self.overall.add(n, int(agree.sum()), float(overlap.sum()))
        for g in self.groups:
            keys, inv = np.unique(np.asarray(groups[g], dtype=object), return_inverse=True)
            a = np.bincount(inv, weights=agree, minlength=len(keys))
            o = np.bincount(inv, weights=overlap, minlength=len(keys))
            c = np.bincount(inv, minlength=len(keys))
            tallies = self.by[g]
            for j, key in enumerate(keys.tolist()):
                t = tallies.get(key)
                if t is None:
                    t = tallies[key] = Tally()
                t.add(int(c[j]), int(round(a[j])), float(o[j]))
        np.add.at(self.transitions, (li[:, 0], ci[:, 0]), 1)
        if not agree.all():
            self._changed(devices, groups["trigger"], li, ls, ci, cs, candidate, agree)
        if truth is not None:
            right = np.asarray(truth, dtype=np.int64)
            known = right >= 0
            if known.any():
                self.calibration["live"].add(ls[known, 0], li[known, 0] == right[known])
                self.calibration["candidate"].add(cs[known, 0], ci[known, 0] == right[known])

    def _changed(
        self,
        devices: Sequence[str],
        triggers: Sequence[str],
        li: np.ndarray,
        ls: np.ndarray,
        ci: np.ndarray,
        cs: np.ndarray,
        candidate: np.ndarray,
        agree: np.ndarray,
    ) -> None:
        rows = np.flatnonzero(~agree)
        # Score gap: how much more the candidate believes its new top-1 than the live top-1.
        gaps = cs[rows, 0] - candidate[rows, li[rows, 0]]
        labels = self.labels
        for j, gap in zip(rows.tolist(), gaps.tolist(), strict=True):
            d = devices[j]
            self.changed_devices.add(d)
            old = self.changed.get(d)
            if old is None or gap > old["gap"]:
                self.changed[d] = {
                    "device": d,
                    "gap": gap,
                    "live": labels[li[j, 0]],
                    "live_score": float(ls[j, 0]),
                    "candidate": labels[ci[j, 0]],
                    "candidate_score": float(cs[j, 0]),
                    "trigger": triggers[j],
                }
        if len(self.changed) > 4 * self.keep_changed:  # bounded: keep the largest gaps
            keep = sorted(self.changed.values(), key=_GAP, reverse=True)[: self.keep_changed]
            self.changed = {c["device"]: c for c in keep}

    def time(self, version: str, rows: int, seconds: float) -> None:
        self.timing[version].add(rows, seconds)

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    # -- report ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        top = sorted(self.changed.values(), key=_GAP, reverse=True)[: self.keep_changed]
        return {
            "labels": list(self.labels),
            "events": self.events,
            "overall": self.overall.as_dict(),
            "groups": list(self.groups),
            "by": {g: {k: t.as_dict() for k, t in sorted(ts.items())} for g, ts in self.by.items()},
            "transitions": self.transitions.tolist(),
            "changed_devices": len(self.changed_devices),
            "changed_device_ids": sorted(self.changed_devices),
            "top_changes": top,
            "timing": {v: t.as_dict() for v, t in self.timing.items()},
            "calibration": {v: c.as_dict() for v, c in self.calibration.items() if sum(c.n)},
            "rejected": dict(sorted(self.rejected.items())),
            "keep_changed": self.keep_changed,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Comparison:
        c = cls(d["labels"], int(d["keep_changed"]), tuple(d.get("groups", GROUPS)))
        c.events = int(d["events"])
        c.overall = Tally.from_dict(d["overall"])
        c.by = {g: {k: Tally.from_dict(t) for k, t in d["by"][g].items()} for g in c.groups}
        c.transitions = np.asarray(d["transitions"], dtype=np.int64)
        c.changed_devices = set(d["changed_device_ids"])
        c.changed = {x["device"]: x for x in d["top_changes"]}
        c.timing = {v: Timing.from_dict(t) for v, t in d["timing"].items()}
        for v, cal in d["calibration"].items():
            c.calibration[v] = Calibration.from_dict(cal)
        c.rejected = dict(d["rejected"])
        return c


def _GAP(c: dict[str, Any]) -> float:  # noqa: N802 - used like a key constant
    return float(c["gap"])


def _ms(s: float | None) -> float | None:
    return None if s is None else 1000 * s
