"""What a worker remembers per device of its assigned partitions: the newest heartbeat, the
features and validity of its last prediction, and its context. Columnar (numpy rows indexed by
a slot per device) so the policy runs vectorized over a batch. Written to the worker-state
changelog with every prediction and restored from it when a partition is assigned
(`workers.precompute.state.restore`), so a restart or a rebalance does not forget a device; the entries of a
revoked partition are dropped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from precast.fleet import Fleet, load_fleet
from precast.fleet.context import DeviceContext


class DeviceTable:
    # Columns, one row per slot, grown together by `_alloc`.
    hb: np.ndarray  # newest heartbeat's state columns (FeatureModel.state)
    hb_time: np.ndarray  # its event time, ms; -1: none seen
    hb_gap: np.ndarray  # the interval before it (its event time - the previous one's); -1
    # unknown, -2 restored (the restored heartbeat time is the last state write's, so the
    # interval to the next heartbeat says nothing about the device's cadence)
    hb_offset: np.ndarray  # its record's offset (heartbeats topic, the device's partition); -1
    last_x: np.ndarray  # features of the last prediction
    valid_until: np.ndarray  # the last prediction's valid_until, ms
    predicted_at: np.ndarray  # worker clock, ms
    computed_at: np.ndarray  # the last prediction's computed_at (order key), ms
    partition: np.ndarray  # -1: a free slot

    rank_idx: np.ndarray  # the last inference's top-(K+1) classes, best first
    top_scores: np.ndarray  # its top-K scores (what a renewal republishes)
    margin_top1: np.ndarray  # its top-1 log margin; -1: unknown
    margin_topk: np.ndarray  # its top-K log margin; -1: unknown
    hot_until: np.ndarray  # read or watched until (wall ms); -1: never

    def __init__(self, capacity: int = 1024, top_k: int = 3, fleet: Fleet | None = None) -> None:
        self.top_k = top_k
        # labels of the current model (set when the pipeline primes a model): restored class
        # indexes at or past it are not trusted
        self.n_labels = 256
        self.fleet = fleet or load_fleet()
        # the state columns of a device that sent no heartbeat (each column's `missing` rule)
        self._default_hb = self.fleet.features.fill
        self.slot: dict[str, int] = {}
        self._free: list[int] = []
        self.contexts: dict[str, DeviceContext] = {}
        self._alloc(max(16, capacity))

    def _alloc(self, cap: int) -> None:
        old = getattr(self, "hb", None)
        n = 0 if old is None else len(old)
        grow: dict[str, np.ndarray] = {
            "hb": np.zeros((cap, len(self._default_hb))),
            "hb_time": np.full(cap, -1, dtype=np.int64),
            "hb_gap": np.full(cap, -1, dtype=np.int64),  # a device's heartbeat cadence
            "hb_offset": np.full(cap, -1, dtype=np.int64),
            "last_x": np.zeros((cap, self.fleet.features.width), dtype=np.float32),
            "valid_until": np.full(cap, -1, dtype=np.int64),
            "predicted_at": np.full(cap, -(1 << 62), dtype=np.int64),  # worker clock, ms
            "computed_at": np.full(cap, -1, dtype=np.int64),  # last prediction's order key
            "partition": np.full(cap, -1, dtype=np.int32),
            # The last inference's answer (class indexes, scores) and its top-1 and top-K log
            # margins: what a renewal republishes and what the policy's check uses.
            "rank_idx": np.zeros((cap, self.top_k + 1), dtype=np.int64),  # top-(K+1) classes
            "top_scores": np.zeros((cap, self.top_k), dtype=np.float32),
            "margin_top1": np.full(cap, -1, dtype=np.float32),
            "margin_topk": np.full(cap, -1, dtype=np.float32),
            "hot_until": np.full(cap, -1, dtype=np.int64),  # read or watched until (wall ms)
        }
        for name, arr in grow.items():
            if n:
                arr[:n] = getattr(self, name)
            setattr(self, name, arr)
        self._free.extend(range(cap - 1, n - 1, -1))

    def __len__(self) -> int:
        return len(self.slot)

    def __contains__(self, device: str) -> bool:
        return device in self.slot

    def slots(self, devices: Sequence[str], partitions: Sequence[int]) -> np.ndarray:
        """Slot of each device, allocating fresh (empty) ones for devices not seen before."""
        slot = self.slot
        if not slot.keys() >= set(devices):
            fresh: dict[str, int] = {}  # new device -> its partition (first occurrence)
            for d, p in zip(devices, partitions, strict=True):
                if d not in slot and d not in fresh:
                    fresh[d] = p
            while len(self._free) < len(fresh):
                self._alloc(2 * len(self.hb))
            taken = self._free[len(self._free) - len(fresh) :][::-1]  # the same order pop() gives
            del self._free[len(self._free) - len(fresh) :]
            s = np.array(taken, dtype=np.int64)
            self._reset(s)
            self.partition[s] = list(fresh.values())
            slot.update(zip(fresh, taken, strict=True))
        return np.fromiter(map(slot.__getitem__, devices), dtype=np.int64, count=len(devices))

    def _reset(self, s: np.ndarray | int) -> None:
        self.hb[s] = 0
        self.hb_time[s] = -1
        self.hb_gap[s] = -1
        self.hb_offset[s] = -1
        self.last_x[s] = 0
        self.valid_until[s] = -1
        self.predicted_at[s] = -(1 << 62)
        self.margin_top1[s] = -1  # unknown: the policy predicts
        self.margin_topk[s] = -1
        self.hot_until[s] = -1
        self.computed_at[s] = -1

    def has_data(self, device: str) -> bool:
        """Whether anything from the device itself is known (a heartbeat or context)."""
        s = self.slot.get(device)
        if s is not None and self.hb_time[s] >= 0:
            return True
        c = self.contexts.get(device)
        return c is not None and c.as_of_ms > 0

    def restore(self, devices: list[str], partitions: list[int], rec: np.ndarray) -> int:
        """Adopt changelog records (`workers.precompute.state.changelog.RECORD`) for devices of a partition
        being assigned, before any of its input is processed. Returns how many records held a
        last inference that cannot be used (class indexes past the model's labels, scores,
        margins or features not finite; anyone who can write the topic can write those): their device keeps
        its heartbeat state and predicts afresh at its next heartbeat."""
        if not devices:
            return 0
        rec = rec.copy()  # writable: np.frombuffer's view of the fetched bytes is not
        k1 = min(self.top_k + 1, rec["rank"].shape[1])
        bad = (
            (rec["rank"][:, :k1] >= self.n_labels).any(axis=1)
            | ~np.isfinite(rec["scores"]).all(axis=1)
            | ~np.isfinite(rec["margins"]).all(axis=1)
            # the features the policy compares a new heartbeat with: a NaN there (a signalling
            # one raises in numpy) would make every later comparison meaningless
            | ~np.isfinite(rec["last_x"]).all(axis=1)
        )
        if bad.any():
            rec["valid_until"][bad] = -1  # no prediction to renew: the next heartbeat infers
            rec["last_x"][bad] = 0
            rec["rank"][bad] = 0
            rec["scores"][bad] = 0
            rec["margins"][bad] = -1
        s = self.slots(devices, partitions)
        self.hb[s] = rec["hb"]
        self.hb_time[s] = rec["hb_time"]
        self.hb_gap[s] = -2
        self.hb_offset[s] = rec["hb_offset"]
        self.last_x[s] = rec["last_x"]
        self.valid_until[s] = rec["valid_until"]
        self.predicted_at[s] = rec["produced_at"]
        self.computed_at[s] = rec["computed_at"]
        k = self.top_k
        if k + 1 <= rec["rank"].shape[1]:  # the speculation policy's view of the last inference
            self.rank_idx[s] = rec["rank"][:, : k + 1]
            self.top_scores[s] = rec["scores"][:, :k]
            self.margin_top1[s] = rec["margins"][:, 0]
            self.margin_topk[s] = rec["margins"][:, 1]
        return int(bad.sum())

    def heartbeat_cols(self, slots: np.ndarray) -> np.ndarray:
        """Newest heartbeat columns per slot; the documented default row where none was seen."""
        cols = self.hb[slots]
        none = self.hb_time[slots] < 0
        if none.any():
            cols[none] = self._default_hb
        return cols

    def context(self, device: str) -> DeviceContext:
        c = self.contexts.get(device)
        if c is None:
            c = self.contexts[device] = self.fleet.context.new(device)
        return c

    def forget_partitions(self, partitions: Iterable[int]) -> int:
        """Drop every device of these partition indexes; returns how many."""
        parts = set(partitions)
        gone = [d for d, s in self.slot.items() if int(self.partition[s]) in parts]
        for d in gone:
            s = self.slot.pop(d)
            self._free.append(s)
            self.partition[s] = -1  # a free slot: scans over the columns skip it
            self.contexts.pop(d, None)
        return len(gone)

    def clear(self) -> None:
        self.__init__(len(self.hb), self.top_k, self.fleet)  # type: ignore[misc]
