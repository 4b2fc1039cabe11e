"""`python -m bench audit`: the prediction records its logs are made of, a log of N leaves built
through the auditor's own batch step, and the times and sizes of its inclusion and consistency
proofs."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import orjson

PARTITIONS = 6


def leaf_value(i: int) -> bytes:
    dev = f"dev-{i % 10_000:06d}"
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": dev,
            "candidates": [
                {"strategy": "replace_part", "score": 0.61},
                {"strategy": "remote_reset", "score": 0.25},
                {"strategy": "dispatch_technician", "score": 0.14},
            ],
            "model_version": "1.0.0",
            "computed_at_ms": 1_750_000_000_000 + i,
            "valid_until_ms": 1_750_000_600_000 + i,
            "produced_at_ms": 1_750_000_000_050 + i,
            "trigger": "heartbeat",
            "lineage": [
                {
                    "topic": "precast.heartbeats",
                    "partition": i % PARTITIONS,
                    "offset": i,
                    "event_id": f"{i:032x}",
                    "trace_id": f"{i:032x}",
                }
            ],
            "inference_ms": 3,
        }
    )


def big_log(n: int, tmp: Path, every: int):
    """n leaves appended through the auditor's own batch step, a signed checkpoint every
    `every` leaves (what 1/s looks like at that rate)."""
    from precast.audit.batch import append_records
    from precast.audit.checkpoint import Checkpoint, Signer
    from precast.audit.store import LogStore
    from precast.kafka.types import Record

    signer = Signer.generate("bench.local/audit")
    store = LogStore(tmp / "big.db")
    store.bind(signer.name, "bench.predictions")
    offsets = [0] * PARTITIONS
    batch = 5_000
    for start in range(0, n, batch):
        recs = []
        for i in range(start, min(n, start + batch)):
            p = i % PARTITIONS
            recs.append(Record("bench.predictions", p, offsets[p], None, leaf_value(i)))
            offsets[p] += 1
        b = append_records(store, "bench.predictions", recs)
        if b.tree.size % every == 0 or b.tree.size == n:
            cp = Checkpoint(signer.name, b.tree.size, b.tree.root())
            store.add_checkpoint(cp.size, cp.root, signer.sign(cp), 0)
    return store, signer


def proof_times(store, sizes: list[int], samples: int) -> dict[str, float]:
    from precast.audit.hashing import leaf_hash
    from precast.audit.proofs import Prover, verify_consistency, verify_inclusion

    prover = Prover(store)
    n = store.size()
    root = store.latest_checkpoint().root
    rng = random.Random(7)
    inc_t, inc_len, ver_t = [], [], []
    for _ in range(samples):
        i = rng.randrange(n)
        t = time.perf_counter()
        proof = prover.inclusion(i, n)
        inc_t.append(time.perf_counter() - t)
        inc_len.append(len(proof))
        lh = leaf_hash(store.leaf(i)[1])
        t = time.perf_counter()
        verify_inclusion(i, n, lh, proof, root)
        ver_t.append(time.perf_counter() - t)
    con_t, con_len = [], []
    for _ in range(samples):
        a, b = sorted(rng.sample(sizes, 2))
        t = time.perf_counter()
        proof = prover.consistency(a, b)
        con_t.append(time.perf_counter() - t)
        con_len.append(len(proof))
        verify_consistency(a, b, store.checkpoint(a).root, store.checkpoint(b).root, proof)
    return {
        "inclusion_ms": statistics.median(inc_t) * 1000,
        "inclusion_p99_ms": sorted(inc_t)[int(0.99 * (len(inc_t) - 1))] * 1000,
        "inclusion_bytes": statistics.mean(inc_len) * 32,
        "inclusion_verify_us": statistics.median(ver_t) * 1e6,
        "consistency_ms": statistics.median(con_t) * 1000,
        "consistency_bytes": statistics.mean(con_len) * 32,
    }
