"""The worker-state changelog record: what a worker needs per device to carry on where the
previous owner of a partition stopped (newest heartbeat columns and event time, the last
prediction's features, order key and validity), as one fixed-size little-endian record whose
layout follows the fleet spec (its state columns and features) and which carries the first 8
bytes of the spec's feature hash: a record written under another spec is skipped (and
counted), never misread; that device's state is then rebuilt from its next events.

Fixed size because a restore reads a whole partition (up to a million devices) on every
assignment: the values of a batch are joined and viewed as one numpy structured array, so
decoding is column-wise at C speed instead of one parse per record (BENCHMARKS.md,
`worker_restore_1m_devices_s`). Pure: no Kafka client here (`workers.precompute.state.restore` reads the topic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from precast.fleet.features import FeatureModel

VERSION = 2
# The speculation policy's view of the last inference (workers.model.sensitivity): ranked
# classes, top-K scores and log margins, for top_k up to MAX_K (beyond it the margins restore as
# unknown and the next heartbeat predicts).
MAX_K = 8


class Layout:
    """The changelog record of one fleet spec."""

    def __init__(self, features: FeatureModel) -> None:
        self.tag = bytes.fromhex(features.hash[:16])
        self.dtype = np.dtype(
            [
                ("version", "u1"),
                ("spec", "V8"),  # the first 8 bytes of the spec's feature hash
                ("hb_time", "<i8"),  # event time of the newest heartbeat used, -1 for none
                ("hb_offset", "<i8"),  # its record's offset (lineage of answers from this state)
                ("computed_at", "<i8"),  # order key of the last prediction: computed_at_ms ...
                ("produced_at", "<i8"),  # ... and produced_at_ms (worker clock; throttling uses it)
                ("valid_until", "<i8"),
                ("hb", "<f8", (len(features.state),)),
                ("last_x", "<f4", (features.width,)),
                ("rank", "u1", (MAX_K + 1,)),  # top-(K+1) class indexes, best first
                ("scores", "<f4", (MAX_K,)),  # top-K scores (what a renewal republishes)
                ("margins", "<f4", (2,)),  # top-1 and top-K log margins; -1 = unknown
            ]
        )
        self.size = self.dtype.itemsize

    def encode(
        self,
        hb_time: np.ndarray,
        computed_at: np.ndarray,
        produced_at: int | np.ndarray,
        valid_until: np.ndarray,
        hb: np.ndarray,
        last_x: np.ndarray,
        rank: np.ndarray | None = None,
        scores: np.ndarray | None = None,
        margins: np.ndarray | None = None,
        hb_offset: np.ndarray | None = None,
    ) -> list[bytes]:
        """One record per row (all arguments row-aligned). `rank` (n, K+1), `scores` (n, K) and
        `margins` (n, 2) describe the last inference for the speculation policy."""
        n = len(hb_time)
        rec = np.empty(n, dtype=self.dtype)
        rec["version"] = VERSION
        rec["spec"] = np.void(self.tag)
        rec["hb_time"] = hb_time
        rec["hb_offset"] = -1 if hb_offset is None else hb_offset
        rec["computed_at"] = computed_at
        rec["produced_at"] = produced_at
        rec["valid_until"] = valid_until
        rec["hb"] = hb
        rec["last_x"] = last_x
        rec["rank"] = 0
        rec["scores"] = 0
        rec["margins"] = -1
        if (
            rank is not None
            and scores is not None
            and margins is not None
            and rank.shape[1] <= MAX_K + 1
        ):
            k = scores.shape[1]
            rec["rank"][:, : k + 1] = rank
            rec["scores"][:, :k] = scores
            rec["margins"] = margins
        buf = rec.tobytes()
        size = self.size
        return [buf[i : i + size] for i in range(0, n * size, size)]

    def decode(
        self, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> tuple[list[str], np.ndarray, int, int]:
        """(device IDs, records, rejected, foreign) of a run of changelog records in log order.
        Only the newest record of each device is kept (a partition not yet compacted holds
        several); a tombstone drops the device; a record of another layout is counted and
        skipped: `foreign` when it was written under another spec (its device starts over)."""
        last: dict[str, int] = {}
        good: list[bytes] = []
        bad = foreign = 0
        size, tag = self.size, self.tag
        for k, v in zip(keys, values, strict=True):
            if not k:
                bad += 1
                continue
            device = k.decode(errors="replace")
            if v is None:
                last.pop(device, None)
                continue
            if len(v) != size or v[0] != VERSION or v[1:9] != tag:
                if len(v) > 9 and v[0] == VERSION and v[1:9] != tag:
                    foreign += 1
                    last.pop(device, None)  # an older record of this spec is older still
                else:
                    bad += 1
                continue
            last.pop(device, None)  # re-insert: dict order follows the newest record
            last[device] = len(good)
            good.append(v)
        rec = np.frombuffer(b"".join(good), dtype=self.dtype)
        if len(last) != len(good):
            rec = rec[np.fromiter(last.values(), dtype=np.int64, count=len(last))]
        return list(last), rec, bad, foreign
