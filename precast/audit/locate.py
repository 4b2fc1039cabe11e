"""Naming the first bad leaf inside a range that only a signed checkpoint bounds.

When leaves were rewritten together with their hashes (a flipped byte with its hash redone, a
leaf deleted and the rest renumbered, two leaves of different partitions swapped), each leaf is
self-consistent and only a signed root disagrees: the checkpoint pair bounds the first bad leaf
to [last matching size, first mismatching size), which after a backlog is the whole backlog
(33,137 leaves in one run). Three more pieces of evidence the log holds narrow it down:

- the inner nodes the auditor stored at append time (every 8th level: one hash per 256 leaves,
  `compact.py`), each the root of its block as it was appended: the first block whose stored
  node differs from the root of its current leaves holds the first bad leaf;
- within that block (or a checkpoint range of at most `SMALL` leaves), a hypothesis that makes
  the block's root match again names the leaf exactly: two leaves exchanged, or a record the
  topic holds inserted where its leaf is missing;
- a leaf that is not what the auditor writes (not canonical, a digest that is not hex), or whose
  indexed columns (partition, offset, device, computed_at, written with it) differ from what
  its data says, was rewritten after it was appended. (A changed hex digit of a digest, with
  its hash redone, stays bounded to its block unless the topic still holds the record.)

The stored nodes are not signed: a writer who also recomputes them leaves only the checkpoint
bound, which stays sound; these steps only name a leaf inside it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from precast.audit.compact import CompactRange
from precast.audit.hashing import leaf_hash, node_hash, root_of
from precast.audit.leaf import LEAF_VERSION, Leaf, decode_leaf, encode_leaf
from precast.audit.store import LogStore, Row

BLOCK_LEVEL = 8  # the lowest level the store keeps nodes of (compact.append's stride)
BLOCK = 1 << BLOCK_LEVEL
SMALL = 64  # a checkpoint range this small is searched directly against the signed root
_DIGEST = re.compile(r"[0-9a-f]{64}")
_KINDS = ("prediction", "lease", "tombstone", "invalid")


@dataclass(frozen=True)
class Missing:
    """A topic record with no leaf: its leaf hash and the leaf positions it may belong at."""

    partition: int
    offset: int
    hash: bytes
    after: int  # first possible position
    before: int  # last possible position


@dataclass(frozen=True)
class Located:
    leaf: int
    what: str
    upto: int | None = None  # set when only a narrower range is known


def locate(
    store: LogStore,
    lo: int,
    hi: int,
    prefix: CompactRange,
    root: bytes,
    missing: Sequence[Missing] = (),
) -> Located | None:
    """The first bad leaf in [lo, hi), where the leaves [0, lo) give the frontier `prefix` and
    the signed root over [0, hi) is `root`; None when nothing narrower than the range is known."""
    block = _first_bad_block(store, lo, hi)
    if block is not None:
        a = block * BLOCK
        rows = store.rows(a, a + BLOCK)
        hashes = [leaf_hash(r[2]) for r in rows]
        target = store.node_hashes(BLOCK_LEVEL, block, block + 1)[0]
        if len(hashes) == BLOCK:
            found = _swap_in_block(a, hashes, target) or _insertion(
                a, hashes, missing, lambda hs: root_of(hs) == target
            )
            if found is not None:
                return found
        return _columns(rows) or Located(
            max(a, lo),
            f"the first bad leaf is in [{max(a, lo)}, {min(a + BLOCK, hi)}): the inner node "
            f"the log stored over leaves [{a}, {a + BLOCK}) does not match them",
            min(a + BLOCK, hi),
        )
    if hi - lo > SMALL:
        return None
    rows = store.rows(lo, hi)
    hashes = [leaf_hash(r[2]) for r in rows]

    def matches(hs: list[bytes]) -> bool:
        tree = CompactRange(prefix.size, list(prefix.hashes))
        tree.extend(hs)
        return tree.root() == root

    if len(hashes) == hi - lo:
        for i in range(len(hashes)):
            for k in range(i + 1, len(hashes)):
                if hashes[i] != hashes[k]:
                    hs = list(hashes)
                    hs[i], hs[k] = hs[k], hs[i]
                    if matches(hs):
                        return _swapped(lo + i, lo + k, "the signed checkpoint")
    return _insertion(lo, hashes, missing, matches) or _columns(rows)


def _first_bad_block(store: LogStore, lo: int, hi: int) -> int | None:
    """The first block overlapping [lo, hi) whose stored node differs from its leaves' root."""
    for j in range(lo // BLOCK, -(-hi // BLOCK)):
        stored = store.node_hashes(BLOCK_LEVEL, j, j + 1)
        if not stored:
            return None  # not a completed block when it was appended: no node to compare
        hashes = [leaf_hash(r[2]) for r in store.rows(j * BLOCK, (j + 1) * BLOCK)]
        if root_of(hashes) != stored[0]:
            return j
    return None


def _swapped(i: int, k: int, by: str) -> Located:
    return Located(i, f"leaves {i} and {k} were swapped: {by} matches with them exchanged")


def _swap_in_block(a: int, hashes: list[bytes], target: bytes) -> Located | None:
    """Two leaves of a perfect block exchanged: each pair costs the two paths to its root."""
    levels = [hashes]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below), 2)])
    n = len(hashes)
    for i in range(n):
        for k in range(i + 1, n):
            if hashes[i] == hashes[k]:
                continue
            changed = {i: hashes[k], k: hashes[i]}
            for level in levels[:-1]:
                up: dict[int, bytes] = {}
                for x in changed:
                    parent = x >> 1
                    if parent in up:
                        continue
                    left = changed.get(parent * 2, level[parent * 2])
                    right = changed.get(parent * 2 + 1, level[parent * 2 + 1])
                    up[parent] = node_hash(left, right)
                changed = up
            if changed[0] == target:
                return _swapped(a + i, a + k, f"the inner node stored over [{a}, {a + n})")
    return None


def _insertion(
    a: int,
    hashes: list[bytes],
    missing: Sequence[Missing],
    matches: Callable[[list[bytes]], bool],
) -> Located | None:
    """A record's leaf deleted and the leaves after it renumbered: put it back at each place
    it may belong (the window keeps its size: its last leaf moves out)."""
    n = len(hashes)
    for m in missing:
        for pos in range(max(a, m.after), min(a + n, m.before + 1)):
            at = pos - a
            if matches(hashes[:at] + [m.hash] + hashes[at : n - 1]):
                return Located(
                    pos,
                    f"leaf {pos} is missing: the topic's record at partition {m.partition} "
                    f"offset {m.offset} belongs there (the leaves after it were renumbered)",
                )
    return None


def _columns(rows: Sequence[Row]) -> Located | None:
    """The first leaf whose data disagrees with the columns stored beside it."""
    for idx, _h, data, part, off, device, computed_at in rows:
        try:
            leaf = decode_leaf(data)
        except ValueError:
            return Located(idx, f"leaf {idx} is not a valid leaf")
        if not _well_formed(leaf, data):
            return Located(idx, f"leaf {idx} was rewritten: it is not a leaf the auditor writes")
        said = (leaf.partition, leaf.offset, leaf.device, leaf.computed_at_ms)
        if said != (part, off, device, computed_at):
            return Located(
                idx,
                f"leaf {idx} was rewritten: its data says partition {leaf.partition} offset "
                f"{leaf.offset}, the row written with it partition {part} offset {off}"
                + ("" if (part, off) != (leaf.partition, leaf.offset) else " (device or time)"),
            )
    return None


def _well_formed(leaf: Leaf, data: bytes) -> bool:
    """What the auditor writes: canonical bytes, a known kind and version, hex digests."""
    return (
        encode_leaf(leaf) == data
        and leaf.kind in _KINDS
        and leaf.v == LEAF_VERSION
        and all(
            d is None or _DIGEST.fullmatch(d) for d in (leaf.candidates_sha256, leaf.value_sha256)
        )
    )
