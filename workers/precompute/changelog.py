"""The worker-state changelog record: what a worker needs per device to carry on where the
previous owner of a partition stopped (newest heartbeat columns and event time, the last
prediction's features, order key and validity), as one fixed-size little-endian record.

Fixed size because a restore reads a whole partition (up to a million devices) on every
assignment: the values of a batch are joined and viewed as one numpy structured array, so
decoding is column-wise at C speed instead of one parse per record (BENCHMARKS.md,
`worker_restore_1m_devices_s`). Pure: no Kafka client here (`workers.precompute.restore` reads the topic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workers.features import HEARTBEAT_COLUMNS, N_FEATURES

VERSION = 1
# The speculation policy's view of the last inference (workers.precompute.sensitivity): ranked classes,
# top-K scores and log margins, for top_k up to MAX_K (beyond it the margins restore as unknown
# and the next heartbeat predicts).
MAX_K = 8
RECORD = np.dtype(
    [
        ("version", "u1"),
        ("hb_time", "<i8"),  # event time of the newest heartbeat used, -1 for none
        ("computed_at", "<i8"),  # order key of the last prediction: computed_at_ms ...
        ("produced_at", "<i8"),  # ... and produced_at_ms (worker clock; throttling uses it)
        ("valid_until", "<i8"),
        ("hb", "<f8", (len(HEARTBEAT_COLUMNS),)),
        ("last_x", "<f4", (N_FEATURES,)),
        ("rank", "u1", (MAX_K + 1,)),  # top-(K+1) class indexes, best first
        ("scores", "<f4", (MAX_K,)),  # top-K scores (what a renewal republishes)
        ("margins", "<f4", (2,)),  # top-1 and top-K log margins; -1 = unknown
    ]
)
SIZE = RECORD.itemsize


def encode(
    hb_time: np.ndarray,
    computed_at: np.ndarray,
    produced_at: int | np.ndarray,
    valid_until: np.ndarray,
    hb: np.ndarray,
    last_x: np.ndarray,
    rank: np.ndarray | None = None,
    scores: np.ndarray | None = None,
    margins: np.ndarray | None = None,
) -> list[bytes]:
    """One record per row (all arguments row-aligned). `rank` (n, K+1), `scores` (n, K) and
    `margins` (n, 2) describe the last inference for the speculation policy."""
    n = len(hb_time)
    rec = np.empty(n, dtype=RECORD)
    rec["version"] = VERSION
    rec["hb_time"] = hb_time
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
    return [buf[i : i + SIZE] for i in range(0, n * SIZE, SIZE)]


def decode(
    keys: Sequence[bytes | None], values: Sequence[bytes | None]
) -> tuple[list[str], np.ndarray, int]:
    """(device IDs, records, rejected count) of a run of changelog records in log order. Only
    the newest record of each device is kept (a partition not yet compacted holds several);
    a tombstone drops the device; a record of another size or version is counted and skipped."""
    last: dict[str, int] = {}
    good: list[bytes] = []
    bad = 0
    for k, v in zip(keys, values, strict=True):
        if not k:
            bad += 1
            continue
        device = k.decode(errors="replace")
        if v is None:
            last.pop(device, None)
            continue
        if len(v) != SIZE or v[0] != VERSION:
            bad += 1
            continue
        last.pop(device, None)  # re-insert: dict order follows the newest record
        last[device] = len(good)
        good.append(v)
    rec = np.frombuffer(b"".join(good), dtype=RECORD)
    if len(last) != len(good):
        rec = rec[np.fromiter(last.values(), dtype=np.int64, count=len(last))]
    return list(last), rec, bad
