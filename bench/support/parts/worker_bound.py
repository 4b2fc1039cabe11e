"""`python -m bench worker`, the upper bound: the same at-least-once worker over the same backlog
with every heartbeat decoded before the run, so that its decode step is a lookup. Issue 27 asks
for `worker_vs_passthrough` >= 0.5; decoding is the largest stage of the profile, and this run
says what the ratio would be if it cost nothing. Nothing else of the worker changes: the same
records come from the broker, and the policy, features, model, encoding, produce and commits
run as they do."""

from __future__ import annotations

import time
from collections.abc import Callable
from operator import methodcaller

import numpy as np

from bench.support.harness import Context, progress

_PARTITION, _OFFSET = methodcaller("partition"), methodcaller("offset")


class Predecoded:
    """Every heartbeat of a backlog, decoded once by the worker's own decoder; `heartbeats`
    stands in for `Decoder.heartbeats` and returns the same columns for the same records."""

    def __init__(self, decoder, records: list) -> None:
        self.index: dict[tuple[int, int], int] = {}
        devices: list[str] = []
        events: list[str | None] = []
        cols, times = [], []
        for i in range(0, len(records), 2_000):
            batch = records[i : i + 2_000]
            hb = decoder.heartbeats(batch, _refuse)
            for m in hb.msgs:
                self.index[(m.partition(), m.offset())] = len(self.index)
            devices += hb.device_ids
            events += hb.event_ids
            cols.append(hb.cols)
            times.append(hb.event_time_ms)
        self.devices, self.events = devices, events
        self.cols, self.times = np.vstack(cols), np.concatenate(times)

    def heartbeats(self, msgs, reject):
        from workers.precompute.ingest.decode import Heartbeats

        parts = list(map(_PARTITION, msgs))
        at = list(map(self.index.__getitem__, zip(parts, map(_OFFSET, msgs), strict=True)))
        devices, events = self.devices, self.events
        return Heartbeats(
            list(msgs),
            [devices[i] for i in at],
            [events[i] for i in at],
            parts,
            self.times[at],
            self.cols[at],
        )


def _refuse(*_: object) -> None:
    raise AssertionError("the benchmark's heartbeats are all valid")


def _read_all(ctx: Context, topic: str, ends: dict[int, int]) -> list:
    from precast.kafka import Consumer, TopicPartitionOffset

    c = Consumer(ctx.kafka_settings(), ctx.unique("pre"))
    c.assign([TopicPartitionOffset(topic, p, 0) for p in ends])
    out: list = []
    total, deadline = sum(ends.values()), time.monotonic() + 120
    while len(out) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"read {len(out):,} of the backlog's {total:,} records in 120 s")
        out += c.consume(5_000, 1.0)
    c.close()
    return out


def decode_free(
    ctx: Context, topics, ends: dict[int, int], run_worker: Callable[..., tuple]
) -> tuple[float, dict[str, float]]:
    """(events/s, seconds per stage) of the best of two runs with decoding done beforehand."""
    from precast.fleet import load_fleet
    from workers.precompute.ingest.decode import Decoder

    progress("upper bound: decoding the backlog before the run")
    pre = Predecoded(Decoder(load_fleet()), _read_all(ctx, topics.heartbeats.name, ends))
    best, stages = 0.0, {}
    for rnd in (1, 2):
        progress(f"upper bound, round {rnd}: worker with decoding done beforehand")
        rate, _preds, st = run_worker(ctx, topics, ends, predecoded=pre)
        if rate > best:
            best, stages = rate, st
    return best, stages
