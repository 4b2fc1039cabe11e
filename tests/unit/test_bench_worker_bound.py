"""The worker benchmark's upper bound is only a bound if its lookup hands the pipeline what the
decoder would: the same records, devices, event ids, partitions, times and state columns, for
batches cut anywhere in the backlog, in any order of partitions."""

import numpy as np
import orjson

from bench.support.parts.worker_bound import Predecoded
from precast.fleet import load_fleet
from precast.kafka import Record
from producers.simulator import Fleet
from workers.precompute.ingest.decode import Decoder

T0 = 1_760_000_000_000


def _backlog(devices: int = 600, rounds: int = 3) -> list[Record]:
    sim, out = Fleet(devices, seed=5), []
    for r in range(rounds):
        for e in sim.heartbeats(devices, T0 + 1_000 * r):  # the simulator's whole wire mix
            p = len(out) % 6
            out.append(Record("hb", p, len(out) // 6, e["device_id"].encode(), orjson.dumps(e)))
    return out


def _refuse(*_: object) -> None:
    raise AssertionError("simulator heartbeats are valid")


def test_the_lookup_returns_what_the_decoder_returns():
    recs = _backlog()
    pre = Predecoded(Decoder(load_fleet()), recs)
    # batches of another size than the one it was built with, and partitions interleaved
    shuffled = sorted(recs, key=lambda m: (m.offset() % 7, m.partition(), m.offset()))
    for i in range(0, len(shuffled), 251):
        batch = shuffled[i : i + 251]
        want = Decoder(load_fleet()).heartbeats(batch, _refuse)
        got = pre.heartbeats(batch, _refuse)
        assert got.msgs == want.msgs
        assert got.device_ids == want.device_ids
        assert got.event_ids == want.event_ids
        assert got.partitions == want.partitions
        assert np.array_equal(got.event_time_ms, want.event_time_ms)
        assert np.array_equal(got.cols, want.cols)
        assert len(set(got.device_ids)) > 1  # not one row repeated
