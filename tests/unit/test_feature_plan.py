"""The compiled feature plan (`FeatureModel.build`) against the spec read one feature at a time
(`build_each`), bit for bit, on both shipped fleets: nulled metrics, unknown and out-of-range
codes, context values of any size, with and without standardization statistics."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precast.fleet import load_fleet

FLEETS = Path(__file__).resolve().parents[2] / "schemas" / "fleets"
SPECS = {name: load_fleet(FLEETS / f"{name}.toml") for name in ("devices", "trailers")}


def _rows(fm, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    state = np.empty((n, len(fm.state)), dtype=np.float64)
    for i, c in enumerate(fm.state):
        if c.kind == "code":
            state[:, i] = rng.integers(-1, len(c.vocabulary) + 1, n)
        elif c.kind == "member":
            state[:, i] = rng.integers(0, 2, n)
        else:
            state[:, i] = rng.choice([0.0, 1.0, 1e-7, 3.5, 250.0, 1e9]) * rng.random(n) * 10
        state[rng.random(n) < 0.2, i] = np.nan  # a nulled value: the missing rule
    context = rng.random((n, len(fm.context.names))) * rng.choice([1.0, 100.0, 1e6])
    context[rng.random(context.shape) < 0.1] = 0.0
    return state, context


@pytest.mark.parametrize("name", sorted(SPECS))
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 70))
def test_the_plan_equals_the_spec_read_one_feature_at_a_time(name, seed, n):
    fm = SPECS[name].features
    state, context = _rows(fm, np.random.default_rng(seed), n)
    raw = fm.build_each(state, context)
    assert np.array_equal(fm.build(state, context), raw, equal_nan=True)
    if fm.standardized:
        stats = {**fm.fit_standardization(raw), fm.standardized[0]: (1.0, 2.0)}
        want = fm.build_each(state, context, stats)
        assert np.array_equal(fm.build(state, context, stats), want, equal_nan=True)
        j = fm.names.index(fm.standardized[0])  # (x - 1) / 2 moved every value: applied
        assert not np.isclose(want[:, j], raw[:, j]).any()


def test_a_standardized_feature_without_statistics_is_refused_by_the_plan_too():
    fm = SPECS["trailers"].features
    assert fm.standardized, "the trailers fleet declares a standardized feature"
    state, context = _rows(fm, np.random.default_rng(0), 3)
    for build in (fm.build, fm.build_each):
        with pytest.raises(ValueError, match="no statistics"):
            build(state, context, {})
