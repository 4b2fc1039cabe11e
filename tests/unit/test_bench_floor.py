"""The floor benchmark's hop split: each hop between the right two clocks, the hops of a probe
summing to its end-to-end time, and a probe the reader never saw left out, not counted as 0."""

import pytest

from bench.support.parts.kafka_floor import HOPS, split_hops


def test_each_hop_is_measured_between_its_own_two_clocks():
    probes = {
        b"probe-a": [1_000.0, 1_001.5],
        b"probe-b": [2_000.0, 2_000.5],
        b"lost": [3_000.0, 3_001.0],
    }
    seen = {b"probe-a": (1_010.0, 1_004.0), b"probe-b": (2_003.0, 2_002.0)}  # (received, relayed)
    hops = split_hops(probes, seen)
    assert hops["e2e"] == [10.0, 3.0]
    assert hops["producer -> broker"] == [1.5, 0.5]
    assert hops["broker -> relay -> broker"] == [2.5, 1.5]
    assert hops["broker -> reader"] == [6.0, 1.0]
    for i in range(2):
        assert sum(hops[h][i] for h, _, _ in HOPS) == pytest.approx(hops["e2e"][i])
