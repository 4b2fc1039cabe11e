"""Resume without duplicates: find out which records a crashed run wrote after its last
checkpoint.

The producer is idempotent, so in each target partition this job's records land in the order
they were produced, with no gaps: what a crashed run wrote after `scan_from[t]` is, for every
source partition p, a prefix of the records from p that go to t. Reading those target tails and
matching them against the source records from `next[p]` (record content: key, value, headers,
and the timestamp when it is kept) tells how many records of each (p, t) pair to skip. No
marker header is added, so a replay stays byte-for-byte identical to its source.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from precast.kafka import Headers

Pair = tuple[int, str]  # (source partition, target key "partition@topic")


def digest(key: bytes | None, value: bytes | None, headers: Headers | None, ts_ms: int) -> int:
    """Content identity of a written record (timestamp 0 when it is not kept)."""
    return hash((key, value, tuple(headers) if headers else (), ts_ms))


@dataclass
class Matcher:
    """Collects the target tails, then the source records in order, then decides the skips."""

    tails: dict[str, list[int]]
    already: dict[Pair, int] = field(default_factory=dict)  # skips a previous resume decided
    _queues: dict[Pair, deque[int]] = field(default_factory=dict)
    _passed: Counter[Pair] = field(default_factory=Counter)
    _unseen: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for ds in self.tails.values():
            self._unseen.update(ds)

    @property
    def satisfied(self) -> bool:
        """Every tail record has a source candidate: reading further cannot change the result."""
        return not +self._unseen

    def add(self, p: int, tkey: str, d: int) -> None:
        """Feed the next source record of partition p (in offset order) that goes to `tkey`."""
        pair = (p, tkey)
        if self._passed[pair] < self.already.get(pair, 0):
            self._passed[pair] += 1  # written before scan_from: not in the tail
            return
        self._queues.setdefault(pair, deque()).append(d)
        if self._unseen[d] > 0:
            self._unseen[d] -= 1

    def skips(self) -> tuple[dict[Pair, int], int]:
        """(records to skip per pair, including earlier decisions; tail records that are not
        this job's, e.g. written by another producer)."""
        matched: Counter[Pair] = Counter(self.already)
        foreign = 0
        by_target: dict[str, list[tuple[int, deque[int]]]] = {}
        for (p, tkey), q in sorted(self._queues.items()):
            by_target.setdefault(tkey, []).append((p, q))
        for tkey, tail in self.tails.items():
            queues = by_target.get(tkey, [])
            for d in tail:
                for p, q in queues:
                    if q and q[0] == d:
                        q.popleft()
                        matched[(p, tkey)] += 1
                        break
                else:
                    foreign += 1
        return {k: v for k, v in matched.items() if v}, foreign


def encode_skips(skips: dict[Pair, int]) -> dict[str, int]:
    return {f"{p}|{tkey}": n for (p, tkey), n in skips.items() if n}


def decode_skips(raw: dict[str, int]) -> dict[Pair, int]:
    out = {}
    for k, n in raw.items():
        p, tkey = k.split("|", 1)
        out[(int(p), tkey)] = int(n)
    return out


def total(skips: Iterable[int]) -> int:
    return sum(skips)
