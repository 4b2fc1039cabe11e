"""KS, BH and the effect floor of the drift monitor, against scipy and by construction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from workers.drift.stats import benjamini_hochberg, ks_pvalues, ks_statistics, test_window


@pytest.mark.parametrize("shift", [0.0, 0.05, 0.3])
def test_statistics_and_pvalues_match_scipy(shift):
    rng = np.random.default_rng(7)
    ref = np.sort(rng.normal(size=(4, 3_000)), axis=1)
    window = rng.normal(size=(1_500, 4)) + shift
    window[:, 3] = np.round(window[:, 3])  # a discrete feature: ties on both sides
    ref[3] = np.sort(np.round(ref[3]))
    d = ks_statistics(ref, window)
    p = ks_pvalues(d, 1_500, 3_000)
    for j in range(4):
        expect = stats.ks_2samp(ref[j], window[:, j], method="asymp")
        assert d[j] == pytest.approx(expect.statistic, abs=1e-12)
        # Same limit distribution scipy's kstwobign implements.
        assert p[j] == pytest.approx(
            stats.kstwobign.sf(np.sqrt(1_500 * 3_000 / 4_500) * d[j]), rel=1e-9, abs=1e-300
        )


def test_benjamini_hochberg_step_up():
    p = np.array([0.04, 0.001, 0.03, 0.5, 0.02])
    # sorted: 0.001 (<= .01), 0.02 (<= .02), 0.03 (<= .03), 0.04 (<= .04), 0.5 (> .05)
    assert benjamini_hochberg(p, 0.05).tolist() == [True, True, True, False, True]
    assert not benjamini_hochberg(np.array([0.2, 0.3]), 0.05).any()
    # Step-up: a larger p-value can be rejected because a later rank passes.
    assert benjamini_hochberg(np.array([0.026, 0.027]), 0.05).all()


def test_effect_floor_keeps_a_huge_window_from_alarming_on_a_trivial_shift():
    rng = np.random.default_rng(1)
    ref = np.sort(rng.normal(size=(2, 20_000)), axis=1)
    window = rng.normal(size=(200_000, 2))
    window[:, 0] += 0.05  # significant at this size, but D ~ 0.02
    window[:, 1] += 0.5  # a real shift: D ~ 0.2
    r = test_window(ref, window, alpha=0.01, min_effect=0.05)
    assert r.p_value[0] < 1e-6 and r.statistic[0] < 0.05
    assert r.flagged.tolist() == [False, True]
    assert r.window == 200_000 and r.reference == 20_000


def test_false_alarms_on_same_distribution_stay_near_alpha():
    rng = np.random.default_rng(5)
    ref = np.sort(rng.normal(size=(8, 5_000)), axis=1)
    alarms = sum(
        test_window(ref, rng.normal(size=(2_000, 8)), alpha=0.05, min_effect=0.0).drifted
        for _ in range(200)
    )
    assert alarms / 200 <= 0.1  # BH at 5 % under the global null, with sampling slack


def test_window_feature_count_must_match():
    with pytest.raises(ValueError, match="features"):
        ks_statistics(np.zeros((3, 10)), np.zeros((5, 2)))
