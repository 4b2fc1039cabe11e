"""The cluster benchmark places the workers' group on the node it is about to kill by computing
Kafka's group placement itself; a wrong hash would silently turn the worst case into a plain
kill. Expected values are Java's String.hashCode results."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.support.parts.cluster_groups import _coordinator, java_hash


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Utils.abs masks it to 0
        ("é", 233),
        ("😀", 31 * 0xD83D + 0xDE00),  # two UTF-16 code units, as Java counts them
    ],
)
def test_java_hash_matches_java_string_hashcode(text: str, expected: int) -> None:
    assert java_hash(text) == expected


def test_coordinator_is_the_leader_of_the_group_partition() -> None:
    parts = [SimpleNamespace(leader=10 + i) for i in range(8)]
    assert _coordinator(parts, "hello") == 10 + 99162322 % 8
    assert _coordinator(parts, "polygenelubricants") == 10  # masked to 0, not negative
