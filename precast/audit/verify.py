"""Full verification of a stored log: every leaf against its hash, the leaves' order against
the topic's offsets, every signed checkpoint against the tree rebuilt from the leaves, and
(optionally) every leaf against the record still in the topic at its offset.

Findings name the first leaf that is wrong wherever the evidence allows: an altered leaf (its
data no longer hashes to the stored hash), a missing index, a leaf out of offset order, a topic
record with no leaf, a leaf that differs from its record. When only a signed root disagrees
(leaf and hash were both rewritten), the signed checkpoints bound the first bad leaf to the
range between the last checkpoint that still matches and the first that does not; `locate.py`
then names the leaf inside that range where the log's stored inner nodes, the topic and the
leaves' own columns allow (a backlog makes the first range the whole backlog)."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from hashlib import sha256

from precast.audit.checkpoint import Checkpoint, CheckpointError, Verifier, open_note
from precast.audit.compact import CompactRange
from precast.audit.hashing import leaf_hash
from precast.audit.leaf import decode_leaf, leaf_data
from precast.audit.locate import Missing, locate
from precast.audit.store import LogStore

# (partition, offset, key, value) of one record of the audited topic.
TopicRecord = tuple[int, int, bytes | None, bytes | None]


@dataclass(frozen=True, order=True)
class Finding:
    leaf: int  # the first leaf concerned (the log's size when none is: a truncation)
    what: str
    # Set when only a range is known: the first bad leaf is in [leaf, upto).
    upto: int | None = None


@dataclass
class Report:
    checkpoint: Checkpoint | None = None
    leaves: int = 0
    checkpoints_checked: int = 0
    topic_checked: int = 0
    topic_unavailable: int = 0  # leaves whose record the topic no longer holds (compaction)
    findings: list[Finding] = field(default_factory=list)
    # What `locate` needs of each range a checkpoint bounds: (lo, hi, frontier at lo, root).
    bounds: list[tuple[int, int, CompactRange, bytes]] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)  # topic records with no leaf

    @property
    def ok(self) -> bool:
        return not self.findings

    def first(self) -> Finding | None:
        """The finding that names the first bad leaf: an exact one inside the earliest range a
        signed checkpoint bounds, else that range."""
        exact = min((f for f in self.findings if f.upto is None), default=None)
        # every range bounds the same first bad leaf: the narrowest says the most
        bound = min(
            (f for f in self.findings if f.upto is not None),
            key=lambda f: (f.upto, -f.leaf),
            default=None,
        )
        if bound is None or (exact is not None and exact.leaf < bound.upto):  # type: ignore[operator]
            return exact
        return bound


@dataclass
class _Placement:
    """Per partition: the offsets the log holds, their leaf indexes and leaf hashes (compact
    arrays: a million leaves cost ~48 MB, not ~200 MB of tuples)."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    leaves: array[int] = field(default_factory=lambda: array("q"))
    hashes: bytearray = field(default_factory=bytearray)
    ordered: bool = True

    def sort(self) -> None:
        """Offset order, for the walk along the topic (only needed after a reordering)."""
        order = sorted(range(len(self.offsets)), key=self.offsets.__getitem__)
        self.offsets = array("q", (self.offsets[i] for i in order))
        self.leaves = array("q", (self.leaves[i] for i in order))
        self.hashes = bytearray(b"".join(self.hashes[i * 32 : i * 32 + 32] for i in order))
        self.ordered = True


def verify_store(
    store: LogStore,
    verifier: Verifier,
    *,
    topic_records: Callable[[dict[int, tuple[int, int]]], Iterable[TopicRecord]] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Check the whole log. `topic_records(ranges)` is given {partition: (first, end)} offsets
    the log covers and yields the topic's records in those ranges (offset order within a
    partition); without it the topic comparison is skipped."""
    report = Report()
    walk = _Walk(report, _signed_checkpoints(store, verifier, report))
    for batch in store.iter_leaves():
        for idx, stored_hash, data in batch:
            walk.leaf(idx, stored_hash, data)
        if progress is not None:
            progress(len(batch))
    walk.finish()
    if topic_records is not None and walk.placement:
        _compare_topic(store, walk.placement, topic_records, report)
    if report.bounds:
        lo, hi, prefix, root = min(report.bounds, key=lambda b: b[0])
        found = locate(store, lo, hi, prefix, root, report.missing)
        if found is not None:
            report.findings.append(Finding(found.leaf, found.what, found.upto))
    return report


class _Walk:
    """One pass over the stored leaves in index order."""

    def __init__(self, report: Report, signed: list[Checkpoint]) -> None:
        self.report = report
        self.placement: dict[int, _Placement] = {}
        self.tree = CompactRange()
        self.pending = [c for c in reversed(signed) if c.size > 0]  # pop() gives the smallest
        self.last_good = 0
        self.good_frontier = CompactRange()
        self.expect = 0
        self.last_offset: dict[int, int] = {}

    def found(self, leaf: int, what: str, upto: int | None = None) -> None:
        self.report.findings.append(Finding(leaf, what, upto))

    def leaf(self, idx: int, stored_hash: bytes, data: bytes) -> None:
        if idx != self.expect:
            self.found(self.expect, f"leaf {self.expect} is missing (the store jumps to {idx})")
            self.expect = idx  # keep checking what follows
        h = sha256(b"\x00" + data).digest()
        if h != stored_hash:
            self.found(idx, f"leaf {idx} was altered: its data does not hash to its stored hash")
        try:
            leaf = decode_leaf(data)
        except ValueError:
            self.found(idx, f"leaf {idx} is not a valid leaf")
        else:
            self.place(idx, leaf.partition, leaf.offset, h)
        self.tree.append(h)
        self.expect += 1
        while self.pending and self.pending[-1].size == self.tree.size:
            self.check(self.pending.pop())

    def place(self, idx: int, p: int, o: int, h: bytes) -> None:
        pl = self.placement.setdefault(p, _Placement())
        prev = self.last_offset.get(p)
        if prev is not None and o <= prev:
            # The first leaf of this partition with a higher offset came too early.
            early = pl.leaves[bisect_right(pl.offsets, o)] if pl.ordered else idx
            self.found(
                early,
                f"leaf {early} is out of order: partition {p} offset {o} (leaf {idx}) "
                f"comes after offset {prev}",
            )
            pl.ordered = False
        self.last_offset[p] = o if prev is None else max(o, prev)
        pl.offsets.append(o)
        pl.leaves.append(idx)
        pl.hashes += h

    def check(self, cp: Checkpoint) -> None:
        self.report.checkpoints_checked += 1
        if self.tree.root() == cp.root:
            self.last_good = cp.size
            self.good_frontier = CompactRange(self.tree.size, list(self.tree.hashes))
            return
        self.report.bounds.append((self.last_good, cp.size, self.good_frontier, cp.root))
        self.found(
            self.last_good,
            f"the signed checkpoint of size {cp.size} does not match the leaves: "
            f"the first bad leaf is in [{self.last_good}, {cp.size})",
            cp.size,
        )

    def finish(self) -> None:
        self.report.leaves = self.tree.size
        if self.pending:
            cp = self.pending[-1]
            self.found(
                self.tree.size,
                f"the log is truncated: the signed checkpoint of size {cp.size} has "
                f"{cp.size - self.tree.size} leaves more than the store; first missing leaf "
                f"{self.tree.size}",
            )


def _signed_checkpoints(store: LogStore, verifier: Verifier, report: Report) -> list[Checkpoint]:
    """Every stored checkpoint whose signature verifies; a bad one is a finding."""
    out: list[Checkpoint] = []
    stored = store.checkpoints()
    if not stored:
        report.findings.append(Finding(0, "the log has no signed checkpoint"))
        return out
    for sc in stored:
        try:
            cp = open_note(sc.note, verifier)
        except CheckpointError as exc:
            report.findings.append(
                Finding(min(sc.size, store.size()), f"checkpoint of size {sc.size}: {exc}")
            )
            continue
        if cp.size != sc.size or cp.root != sc.root:
            report.findings.append(
                Finding(
                    min(sc.size, store.size()),
                    f"checkpoint of size {sc.size}: the stored size or root differs from the signed note",
                )
            )
            continue
        out.append(cp)
    if out:
        report.checkpoint = out[-1]
    if stored[-1].size != (out[-1].size if out else -1):
        report.findings.append(
            Finding(
                min(stored[-1].size, store.size()),
                f"the latest checkpoint (size {stored[-1].size}) is not validly signed",
            )
        )
    return out


def _compare_topic(
    store: LogStore,
    placement: dict[int, _Placement],
    topic_records: Callable[[dict[int, tuple[int, int]]], Iterable[TopicRecord]],
    report: Report,
) -> None:
    topic = str(store.meta("topic"))
    for pl in placement.values():
        if not pl.ordered:
            pl.sort()
    ranges = {p: (pl.offsets[0], pl.offsets[-1] + 1) for p, pl in placement.items()}
    cursor = dict.fromkeys(placement, 0)
    for p, o, key, value in topic_records(ranges):
        if p not in placement:
            continue
        pl = placement[p]
        i = cursor[p]
        # Leaves of this partition below the record's offset have no record in the topic
        # (compacted away, or never there): not checkable here.
        while i < len(pl.offsets) and pl.offsets[i] < o:
            report.topic_unavailable += 1
            i += 1
        cursor[p] = i
        if i == len(pl.offsets) or pl.offsets[i] != o:
            # Its leaf belongs between this partition's neighbouring leaves.
            after = pl.leaves[i - 1] + 1 if i > 0 else 0
            before = pl.leaves[i] if i < len(pl.leaves) else report.leaves
            expected_leaf = leaf_hash(leaf_data(topic, p, o, key, value))
            report.missing.append(Missing(p, o, expected_leaf, after, before))
            report.findings.append(
                Finding(
                    after,
                    f"topic record partition {p} offset {o} has no leaf: one is missing "
                    f"in [{after}, {before}]",
                    before + 1,
                )
            )
            continue
        expected = sha256(b"\x00" + leaf_data(topic, p, o, key, value)).digest()
        if pl.hashes[i * 32 : i * 32 + 32] != expected:
            idx = pl.leaves[i]
            report.findings.append(
                Finding(
                    idx, f"leaf {idx} differs from the topic record at partition {p} offset {o}"
                )
            )
        cursor[p] = i + 1
        report.topic_checked += 1
    for p, pl in placement.items():
        report.topic_unavailable += len(pl.offsets) - cursor[p]
