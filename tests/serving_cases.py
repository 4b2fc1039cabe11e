"""Prediction deliveries for newest-wins property tests: shared by the unit (memory) and the
integration (Redis) tests, so both stores are held to the same expectation."""

from __future__ import annotations

import orjson
from hypothesis import strategies as st

from precast.serving import Entry, Lease, entry_from_prediction, lease_from_record
from schemas.leases import lease_key

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


# -- validity leases (schemas.leases, precast.serving.leases) ---------------------------------------
HORIZON_MS = 5_000


def leased(
    device: str,
    computed: int,
    produced: int,
    generation: int | None,
    *,
    partition: int = 0,
    extension_ms: int = 600_000,
    version: str = "1.0.0",
) -> Entry:
    """An answer with lease terms (generation None: without, e.g. a device that lapsed)."""
    doc = {
        "schema_version": 1,
        "device_id": device,
        "candidates": [{"strategy": "monitor_only", "score": 0.5}],
        "model_version": version,
        "computed_at_ms": computed,
        "valid_until_ms": computed + HORIZON_MS,
        "produced_at_ms": produced,
        "trigger": "heartbeat",
        "lineage": [],
    }
    if generation is not None:
        doc["lease"] = {
            "partition": partition,
            "generation": generation,
            "until_ms": computed + extension_ms,
        }
    return entry_from_prediction(orjson.dumps(doc), received_at_ms=produced + 1)


def lease(partition: int, generation: int, certified: int, produced: int) -> Lease:
    return lease_from_record(
        orjson.dumps(
            {
                "schema_version": 1,
                "kind": "validity_lease",
                "partition": partition,
                "generation": generation,
                "certified_at_ms": certified,
                "valid_until_ms": certified + HORIZON_MS,
                "produced_at_ms": produced,
                "devices": 1,
            }
        ),
        lease_key(partition),
        received_at_ms=produced + 1,
        offset=produced - BASE_MS,
    )


# A delivery is an answer ("a", device, Entry) or a lease ("l", partition, Lease); the two
# generations and two partitions force every rule of the extension to matter.
_answer = st.tuples(
    st.sampled_from(DEVICES),
    st.integers(0, 6),
    st.integers(0, 3),
    st.sampled_from((None, 1, 2)),
    st.integers(0, 1),
).map(
    lambda x: (
        "a",
        x[0],
        # one order key, one record: the production time also says which terms it has
        leased(
            x[0],
            BASE_MS + 1_000 * x[1],
            BASE_MS + 10 + 8 * x[2] + 2 * (x[3] or 0) + x[4],
            x[3],
            partition=x[4],
        ),
    )
)
_lease = st.tuples(
    st.integers(0, 1), st.sampled_from((1, 2)), st.integers(0, 12), st.integers(0, 3)
).map(lambda x: ("l", x[0], lease(x[0], x[1], BASE_MS + 1_000 * x[2], BASE_MS + 20 + x[3])))
lease_deliveries = st.lists(st.one_of(_answer, _lease), min_size=1, max_size=30)


def expected_validity(deliveries: list) -> dict[str, int]:
    """Per device: the validity a read must see, from the newest answer and the newest lease of
    its partition (whatever order the store received them in)."""
    answers: dict[str, Entry] = {}
    leases: dict[int, Lease] = {}
    for kind, k, x in deliveries:
        if kind == "a":
            if k not in answers or x.key > answers[k].key:
                answers[k] = x
        elif k not in leases or x.order > leases[k].order:
            leases[k] = x
    out = {}
    for d, e in answers.items():
        t, own = e.terms, e.valid_until_ms
        x = leases.get(t.partition) if t is not None else None
        if t is None or x is None or t.generation > x.generation:
            out[d] = own
        else:
            out[d] = max(own, min(x.valid_until_ms, e.until_ms))
    return out
