"""Partition choice by device ID, identical to the Java client's default partitioner.

The producer lets librdkafka's `murmur2_random` partitioner place records; this pure version
lets tools and tests predict the placement (and is checked against the Java client's own
`Utils.murmur2` in the integration tests).
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """`Utils.toPositive(Utils.murmur2(key)) % partitions`, the Java default for keyed records."""
    if not key:
        raise ValueError("empty keys have no defined partition")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
