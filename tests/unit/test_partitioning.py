import pytest

from schemas.partitioning import murmur2, partition_for


# Vectors from Kafka's own UtilsTest.testMurmur2 (clients/src/test/.../utils/UtilsTest.java).
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
    ],
)
def test_murmur2_matches_kafka_vectors(data, expected):
    assert murmur2(data) == expected


def test_partition_is_positive_and_in_range():
    for i in range(2000):
        p = partition_for(f"dev-{i}".encode(), 7)
        assert 0 <= p < 7


def test_empty_key_has_no_partition():
    with pytest.raises(ValueError):
        partition_for(b"", 6)
