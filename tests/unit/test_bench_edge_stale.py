"""The edge benchmark's stale rule and Zipf sampler (bench/support/parts/edge_stale.py)."""

from collections import Counter

from bench.support.parts.edge_stale import StaleCounter, p99, zipf_devices


def test_an_older_answer_is_stale_only_past_the_bound():
    c = StaleCounter(bound_s=1.0)
    c.origin("d", (100, 101), at_s=10.0)
    c.origin("d", (200, 201), at_s=20.0)
    assert not c.edge("d", (100, 101), asked_s=20.9)  # newer seen 0.9 s ago: within the bound
    assert c.edge("d", (100, 101), asked_s=21.5)  # newer seen 1.5 s ago: stale
    assert not c.edge("d", (200, 201), asked_s=99.0)  # the newest is never stale
    assert (c.reads, c.stale) == (3, 1)
    assert abs(c.worst_s - 1.5) < 1e-9


def test_order_is_computed_then_produced_and_first_sighting_counts():
    c = StaleCounter(bound_s=1.0)
    c.origin("d", (100, 105), at_s=0.0)
    c.origin("d", (100, 105), at_s=50.0)  # seen again later: the first sighting stays
    assert c.edge("d", (100, 101), asked_s=2.0)  # same computed_at, older produced_at
    assert not c.edge("other", (1, 1), asked_s=2.0)  # nothing seen for that device


def test_zipf_reads_are_skewed_and_in_range():
    picks = zipf_devices(10_000, 50_000)
    assert all(0 <= i < 10_000 for i in picks)
    top = Counter(picks).most_common(1)[0][1]
    assert top > 50_000 * 0.05  # the hottest device takes a large share under Zipf(1.1)
    assert picks[:100] == zipf_devices(10_000, 50_000)[:100]  # seeded: same mix every run


def test_p99_needs_values():
    assert p99([float(i) for i in range(1, 101)]) > 98
    try:
        p99([])
    except ValueError:
        return
    raise AssertionError("p99 of nothing must fail")
