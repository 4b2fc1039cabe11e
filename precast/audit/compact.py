"""The tree's frontier (a compact range over [0, size)): one hash per set bit of `size`, the roots
of the perfect subtrees the leaves so far decompose into, largest first.

Appending costs O(1) amortised hashes and the root O(log n), so the auditor keeps only this in
memory and never rereads the log to sign a checkpoint. `append` also reports each completed
inner node, so the store can keep the levels that make proofs cheap."""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import sha256

from precast.audit.hashing import EMPTY_ROOT, HASH_SIZE


class CompactRange:
    __slots__ = ("hashes", "size")

    def __init__(self, size: int = 0, hashes: list[bytes] | None = None) -> None:
        hashes = list(hashes or [])
        if len(hashes) != size.bit_count():
            raise ValueError(
                f"a frontier of size {size} has {size.bit_count()} hashes, not {len(hashes)}"
            )
        self.size, self.hashes = size, hashes

    def append(
        self, leaf: bytes, on_node: list[tuple[int, int, bytes]] | None = None, stride: int = 8
    ) -> None:
        """Add one leaf hash; completed inner nodes at every `stride`-th level go to `on_node`
        as (level, index, hash)."""
        hashes, n, level = self.hashes, self.size, 0
        hashes.append(leaf)
        while n & 1:
            right = hashes.pop()
            h = sha256(b"\x01" + hashes.pop() + right).digest()
            hashes.append(h)
            n >>= 1
            level += 1
            if on_node is not None and level % stride == 0:
                on_node.append((level, ((self.size + 1) >> level) - 1, h))
        self.size += 1

    def extend(
        self, leaves: Iterable[bytes], on_node: list[tuple[int, int, bytes]] | None = None
    ) -> None:
        append = self.append
        for leaf in leaves:
            append(leaf, on_node)

    def root(self) -> bytes:
        if not self.hashes:
            return EMPTY_ROOT
        r = self.hashes[-1]
        for h in reversed(self.hashes[:-1]):
            r = sha256(b"\x01" + h + r).digest()
        return r

    def to_bytes(self) -> bytes:
        return b"".join(self.hashes)

    @classmethod
    def from_bytes(cls, size: int, blob: bytes) -> CompactRange:
        return cls(size, [blob[i : i + HASH_SIZE] for i in range(0, len(blob), HASH_SIZE)])
