"""The freshness sweep's floor figures: the quarter point as issue 27 defines it (a quarter of
the worker's capacity, down to a multiple of 500/s), and the pipeline's percentile over the
floor's taken at that one rate, never at a neighbouring one."""

import math

import pytest

from bench.support.parts.kafka_floor import quarter_rate, ratio, ratios_at


def test_the_quarter_point_is_a_quarter_of_capacity_down_to_500():
    # The capacities of the sweep of 2026-12-03 15:37 and the quarter points it swept.
    assert quarter_rate(37_539) == 9_000
    assert quarter_rate(30_992) == 7_500
    assert quarter_rate(2_000) == 500
    assert quarter_rate(1_999) == 0


def test_ratio_is_pipeline_over_floor_at_the_asked_percentile():
    pipeline = [float(x) for x in range(1, 101)]  # p50 50.5, p99 99.01
    floor = [x / 10 for x in pipeline]
    assert ratio(pipeline, floor, 50) == pytest.approx(10.0)
    assert ratio(pipeline, floor, 99) == pytest.approx(10.0)
    assert ratio([30.0, 30.0], [2.0, 6.0], 50) == pytest.approx(7.5)


def test_ratio_of_no_probes_or_a_zero_floor_is_nan_not_a_number_that_looks_measured():
    assert math.isnan(ratio([], [1.0], 50))
    assert math.isnan(ratio([1.0], [], 99))
    assert math.isnan(ratio([1.0], [0.0], 50))


def test_ratios_are_taken_at_the_quarter_rate_on_both_sides():
    pipeline = {1_000: [4.0, 4.0], 9_000: [20.0, 20.0], 10_000: [90.0, 90.0]}
    floor = {1_000: [1.0, 1.0], 9_000: [4.0, 4.0], 10_000: [3.0, 3.0]}
    assert ratios_at(pipeline, floor, quarter_rate(37_539)) == {
        "p50": pytest.approx(5.0),
        "p99": pytest.approx(5.0),
    }
    # A development run that did not sweep the quarter point on one side has no figure.
    assert ratios_at(pipeline, {1_000: [1.0]}, 9_000) is None
    assert ratios_at({1_000: [1.0]}, floor, 9_000) is None
