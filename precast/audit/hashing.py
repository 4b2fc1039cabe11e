"""RFC 6962 / RFC 9162 §2.1 hashing: leaf = SHA-256(0x00 ‖ data), node = SHA-256(0x01 ‖ l ‖ r).

The distinct prefixes keep a leaf from ever being taken for an inner node (second-preimage
resistance); the empty tree's hash is SHA-256 of nothing."""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import sha256

HASH_SIZE = 32
EMPTY_ROOT = sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right).digest()


def leaf_hashes(datas: Sequence[bytes]) -> list[bytes]:
    """Many leaves at once: the append path's batch form (one list comprehension, no call per
    leaf into this module)."""
    return [sha256(b"\x00" + d).digest() for d in datas]


def largest_power_of_two_below(n: int) -> int:
    """k with k < n <= 2k: where RFC 6962 splits a tree of n leaves (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(hashes: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes, level by level (no recursion): pairs are hashed left to right and
    an odd last node is carried up unchanged, which yields the same tree as RFC 6962's split at
    the largest power of two below n."""
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    while len(level) > 1:
        nxt = [
            sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
