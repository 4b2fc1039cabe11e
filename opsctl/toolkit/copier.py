"""The engine under replay and redrive: copy bounded offset ranges of one topic into target
partitions, in chunks, with a checkpoint after each acknowledged chunk, and resume a crashed
job without writing anything twice (see `opsctl.toolkit.resume`)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from opsctl.settings import OpsSettings
from opsctl.toolkit.job_checkpoint import Checkpoint, parse_target_key, target_key
from opsctl.toolkit.ranges import OffsetRange
from opsctl.toolkit.reader import BATCH, RangeReader, range_consumer
from opsctl.toolkit.replay_pacing import ReplaySchedule
from opsctl.toolkit.resume import Matcher, decode_skips, digest, encode_skips
from precast.kafka import Admin, Headers, KafkaMessage, Producer
from precast.settings import KafkaSettings
from precast.telemetry.progress import bar

log = logging.getLogger("opsctl.copier")

# (topic, partition, key, value, headers, source timestamp ms: written only when kept)
Out = tuple[str, int, bytes | None, bytes | None, Headers | None, int]
Route = Callable[[KafkaMessage], Out | None]


@dataclass
class CopyJob:
    source: KafkaSettings
    source_topic: str
    target: KafkaSettings
    target_partitions: dict[str, int]  # every topic it may write -> its partition count
    route: Route  # a record -> what to write, or None to leave it out
    keep_timestamps: bool
    pacer: ReplaySchedule
    ops: OpsSettings  # chunk_records and chunk_seconds: how often a checkpoint is written
    checkpoint_path: Path
    # Set when `route` copies every record unchanged into the same partition of this topic:
    # the copier then writes whole batches through the adapter's fast path.
    same_partition_topic: str | None = None
    progress: bool = True
    label: str = "replay"


@dataclass
class CopyStats:
    read: Counter[int] = field(default_factory=Counter)
    written: Counter[int] = field(default_factory=Counter)
    filtered: Counter[int] = field(default_factory=Counter)
    skipped_on_resume: int = 0
    foreign_on_resume: int = 0
    elapsed_s: float = 0.0


def _all_targets(job: CopyJob) -> list[tuple[str, int]]:
    return [(t, q) for t, n in job.target_partitions.items() for q in range(n)]


def _end_offsets(admin: Admin, targets: list[tuple[str, int]]) -> dict[str, int]:
    return {target_key(t, q): o for (t, q), o in admin.end_offsets(targets).items()}


def _recover(job: CopyJob, cp: Checkpoint, ends: dict[str, int]) -> tuple[int, int]:
    """Account for what the crashed run wrote after its last checkpoint; returns (records it
    wrote that will be skipped now, tail records that are not this job's)."""
    tails: dict[str, list[int]] = {}
    tail_ranges: dict[str, list[OffsetRange]] = {}
    for tkey, start in cp.scan_from.items():
        if ends.get(tkey, start) > start:
            t, q = parse_target_key(tkey)
            tail_ranges.setdefault(t, []).append(OffsetRange(q, start, ends[tkey]))
    if not tail_ranges:
        return 0, 0
    keep_ts = job.keep_timestamps
    for t, ranges in tail_ranges.items():
        c = range_consumer(job.target, "resume-tail")
        try:
            for msgs in RangeReader(c, t, ranges):
                for m in msgs:
                    tails.setdefault(target_key(t, m.partition()), []).append(
                        digest(m.key(), m.value(), m.headers(), m.timestamp()[1] if keep_ts else 0)
                    )
        finally:
            c.close()
    already = decode_skips(cp.skip)
    matcher = Matcher(tails, already)
    bound = cp.read_bound or (job.ops.chunk_records + BATCH)
    ranges = [
        OffsetRange(p, cp.next[p], min(e, cp.next[p] + bound)) for p, (_s, e) in cp.ranges.items()
    ]
    c = range_consumer(job.source, "resume-source")
    try:
        for msgs in RangeReader(c, job.source_topic, ranges):
            for m in msgs:
                out = job.route(m)
                if out is not None:
                    matcher.add(
                        m.partition(),
                        target_key(out[0], out[1]),
                        digest(*out[2:5], out[5] if keep_ts else 0),
                    )
            if matcher.satisfied:
                break
    finally:
        c.close()
    skips, foreign = matcher.skips()
    cp.skip = encode_skips(skips)
    return sum(skips.values()) - sum(already.values()), foreign


def _batch_size(pacer: ReplaySchedule) -> int:
    """A paced copy reads small batches (about 0.1 s of work), so checkpoints and progress
    still come every chunk instead of once per 10k-record batch."""
    if not pacer.active:
        return BATCH
    return max(10, min(BATCH, int(pacer.rate * 0.1) if pacer.rate else 200))


def run(job: CopyJob, cp: Checkpoint, *, resumed: bool) -> CopyStats:
    return _Run(job, cp).run(resumed)


class _Run:
    def __init__(self, job: CopyJob, cp: Checkpoint) -> None:
        self.job, self.cp = job, cp
        self.stats = CopyStats()
        self.admin = Admin(job.target)
        self.targets = _all_targets(job)
        self.base_written, self.base_filtered = cp.written, cp.filtered

    def run(self, resumed: bool) -> CopyStats:
        job, cp, stats = self.job, self.cp, self.stats
        t0 = time.monotonic()
        ends = _end_offsets(self.admin, self.targets)
        if resumed:
            stats.skipped_on_resume, stats.foreign_on_resume = _recover(job, cp, ends)
            cp.resumes += 1
        # Everything this job wrote before these offsets is accounted for (before the
        # checkpoint, or in cp.skip); a later crash only has to look past them.
        cp.scan_from = ends
        cp.read_bound = job.ops.chunk_records + BATCH
        cp.save(job.checkpoint_path)

        self.producer = Producer(job.target)
        consumer = range_consumer(job.source, job.label)
        ranges = [OffsetRange(p, cp.next[p], e) for p, (_s, e) in sorted(cp.ranges.items())]
        self.reader = RangeReader(consumer, job.source_topic, ranges, batch=_batch_size(job.pacer))
        progress = bar(cp.remaining(), job.label, enabled=job.progress)
        try:
            self._loop(progress)
        finally:
            progress.close()
            consumer.close()
        for r in ranges:
            stats.read[r.partition] = r.size
        stats.elapsed_s = time.monotonic() - t0
        return stats

    def _loop(self, progress) -> None:  # tqdm or a log-line counter
        job = self.job
        self.skips = Counter(decode_skips(self.cp.skip))
        fast_topic = job.same_partition_topic if not job.pacer.active else None
        chunk_started, chunk_read = time.monotonic(), 0
        for msgs in self.reader:
            if fast_topic is not None and not self.skips:
                # Unfiltered, partitions kept: the whole batch in one adapter call.
                self.producer.copy_same_partition(fast_topic, msgs, job.keep_timestamps)
                self.stats.written.update(self.reader.partitions)
            else:
                self._copy_each(msgs)
            chunk_read += len(msgs)
            progress.update(len(msgs))
            self.producer.poll(0)
            if (
                chunk_read >= job.ops.chunk_records
                or time.monotonic() - chunk_started >= job.ops.chunk_seconds
            ):
                self._checkpoint()
                chunk_started, chunk_read = time.monotonic(), 0
        self._checkpoint(complete=True)

    def _copy_each(self, msgs: list[KafkaMessage]) -> None:
        route, copy, pacer, keep_ts = (
            self.job.route,
            self.producer.copy,
            self.job.pacer,
            self.job.keep_timestamps,
        )
        written, filtered, skips = self.stats.written, self.stats.filtered, self.skips
        paced = pacer.active
        for m in msgs:
            out = route(m)
            if out is None:
                filtered[m.partition()] += 1
                continue
            if skips:
                pair = (m.partition(), target_key(out[0], out[1]))
                if skips.get(pair):
                    skips[pair] -= 1
                    if not skips[pair]:
                        del skips[pair]
                    continue
            if paced:
                pacer.wait(out[5])
            copy(out[0], out[1], out[2], out[3], out[4], out[5] if keep_ts else 0)
            written[m.partition()] += 1

    def _checkpoint(self, complete: bool = False) -> None:
        cp, stats = self.cp, self.stats
        self.producer.flush(120)  # raises DeliveryFailed: the checkpoint then stays where it was
        cp.next = {p: self.reader.positions[p] for p in cp.ranges}
        cp.skip = encode_skips({k: v for k, v in self.skips.items() if v})
        cp.scan_from = _end_offsets(self.admin, self.targets)
        cp.written = self.base_written + sum(stats.written.values())
        cp.filtered = self.base_filtered + sum(stats.filtered.values())
        cp.complete = complete
        cp.save(self.job.checkpoint_path)
