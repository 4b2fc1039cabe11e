"""Inclusion and consistency proofs (RFC 6962 §2.1.1-2.1.2 to build, RFC 9162 §2.1.3.2 and
§2.1.4.2 to verify).

Proofs are built from a `HashSource`: the leaf hashes plus the inner nodes kept at every
`STRIDE`-th level. A perfect subtree of 2^k leaves is then rebuilt from at most 2^STRIDE stored
hashes, so a proof over millions of leaves reads a few thousand hashes, not the whole log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from precast.audit.hashing import HASH_SIZE, largest_power_of_two_below, node_hash, root_of

# Inner nodes are stored at levels 8, 16, 24, ... (a subtree of 256 leaves, of 65,536, ...).
STRIDE = 8


class ProofError(ValueError):
    """A proof that does not verify, or a request for one that cannot exist."""


class HashSource(Protocol):
    def leaf_hashes(self, lo: int, hi: int) -> list[bytes]: ...
    def node_hashes(self, level: int, lo: int, hi: int) -> list[bytes]: ...


class Prover:
    def __init__(self, source: HashSource) -> None:
        self.source = source

    def perfect(self, level: int, index: int) -> bytes:
        """Root of the perfect subtree of 2^level leaves starting at leaf index * 2^level."""
        base = (level // STRIDE) * STRIDE
        span = 1 << (level - base)
        lo = index * span
        hashes = (
            self.source.leaf_hashes(lo, lo + span)
            if base == 0
            else self.source.node_hashes(base, lo, lo + span)
        )
        if len(hashes) != span:
            raise ProofError(f"the store lacks hashes under level {level} node {index}")
        return root_of(hashes)

    def mth(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) for the ranges RFC 6962 proofs ask for (lo is aligned to the range's
        largest power of two)."""
        n = hi - lo
        if n & (n - 1) == 0 and lo % n == 0:
            return self.perfect(n.bit_length() - 1, lo // n)
        k = largest_power_of_two_below(n)
        return node_hash(self.mth(lo, lo + k), self.mth(lo + k, hi))

    def inclusion(self, index: int, size: int) -> list[bytes]:
        if not 0 <= index < size:
            raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
        return self._path(index, 0, size)

    def _path(self, m: int, lo: int, hi: int) -> list[bytes]:
        n = hi - lo
        if n == 1:
            return []
        k = largest_power_of_two_below(n)
        if m < k:
            return self._path(m, lo, lo + k) + [self.mth(lo + k, hi)]
        return self._path(m - k, lo + k, hi) + [self.mth(lo, lo + k)]

    def consistency(self, size1: int, size2: int) -> list[bytes]:
        if not 0 <= size1 <= size2:
            raise ProofError(f"no consistency proof from {size1} to {size2} leaves")
        if size1 in (0, size2):
            return []
        return self._subproof(size1, 0, size2, True)

    def _subproof(self, m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if whole else [self.mth(lo, hi)]
        k = largest_power_of_two_below(n)
        if m <= k:
            return self._subproof(m, lo, lo + k, whole) + [self.mth(lo + k, hi)]
        return self._subproof(m - k, lo + k, hi, False) + [self.mth(lo, lo + k)]


def _check_sizes(*hashes: bytes) -> None:
    if any(len(h) != HASH_SIZE for h in hashes):
        raise ProofError("a hash is not 32 bytes")


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2: the root a correct inclusion proof leads to."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    _check_sizes(leaf, *proof)
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raises `ProofError` unless `leaf` is leaf `index` of the tree of `size` with `root`."""
    _check_sizes(root)
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(
            f"inclusion proof of leaf {index} does not lead to the root of size {size}"
        )


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2: raises `ProofError` unless the tree of size2 with root2 extends the
    tree of size1 with root1."""
    if size1 > size2:
        raise ProofError(f"size {size1} is larger than {size2}")
    if size1 == size2:
        if proof or root1 != root2:
            raise ProofError(f"two trees of size {size1} with different roots or a non-empty proof")
        return
    if size1 == 0:
        if proof:
            raise ProofError("a consistency proof from the empty tree must be empty")
        return
    if not proof:
        raise ProofError("empty consistency proof")
    _check_sizes(root1, root2, *proof)
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fr, sr, sn = _consistency_roots(size1, size2, path)
    if sn != 0 or fr != root1 or sr != root2:
        raise ProofError(f"consistency proof from {size1} to {size2} leaves does not verify")


def _consistency_roots(size1: int, size2: int, path: list[bytes]) -> tuple[bytes, bytes, int]:
    """The loop of RFC 9162 §2.1.4.2: the two roots the path leads to, and what is left of sn."""
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr, sr, sn
