"""Prediction deliveries for newest-wins property tests: shared by the unit (memory) and the
integration (Redis) tests, so both stores are held to the same expectation."""

from __future__ import annotations

import orjson
from hypothesis import strategies as st

from precast.serving import Entry, entry_from_prediction

BASE_MS = 1_800_000_000_000
DEVICES = ("dev-a", "dev-b", "dev-c")
# Versions whose byte order differs from numeric or locale order, to pin the tie-break rule.
VERSIONS = ("1.9.0", "1.10.0", "2.0.0", "2.0.0-rc1", "é-1", "z-1")


def prediction(
    device: str,
    computed: int,
    produced: int,
    version: str,
    *,
    horizon_ms: int = 10**9,
    purge: bool = False,
    backfill: bool = False,
) -> Entry:
    body = orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [] if purge else [{"strategy": "monitor_only", "score": 0.5}],
            "model_version": version,
            "computed_at_ms": computed,
            "valid_until_ms": computed + horizon_ms,
            "produced_at_ms": produced,
            "trigger": "purge" if purge else ("backfill" if backfill else "heartbeat"),
            "lineage": [],
            "backfill": backfill,
        }
    )
    return entry_from_prediction(body, received_at_ms=produced + 1)


# One delivery = (device, computed offset, produced offset, version, backfill); small ranges
# force ties, also between a live answer and a backfill of the same data.
deliveries = st.lists(
    st.tuples(
        st.sampled_from(DEVICES),
        st.integers(0, 5),
        st.integers(0, 3),
        st.sampled_from(VERSIONS),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
).map(
    lambda xs: [
        (d, prediction(d, BASE_MS + c, BASE_MS + 10 + p, v, backfill=b)) for d, c, p, v, b in xs
    ]
)


def expected_newest(items: list[tuple[str, Entry]]) -> dict[str, tuple]:
    """Newest per device by the documented rule, written out here rather than taken from the
    code under test: data time, live before backfill, production time, version bytes."""
    best: dict[str, tuple] = {}
    for d, e in items:
        k = (
            e.computed_at_ms,
            0 if e.backfill else 1,
            e.produced_at_ms,
            e.model_version.encode(),
        )
        if d not in best or k > best[d][0]:
            best[d] = (k, e.key)
    return {d: key for d, (_, key) in best.items()}


def interleavings(items: list[tuple[str, Entry]]):
    """Every delivery twice (duplicates), in an order hypothesis chooses (out of order)."""
    return st.permutations(items + items)
