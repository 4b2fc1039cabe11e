"""precast.fleet.matrix: the worker's feature matrix from a table of sources, for training
elsewhere. It must equal what the worker computes from the same heartbeat and context, and say
what it coerced or dropped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from precast.errors import ConfigError
from precast.fleet import load_fleet
from precast.fleet.matrix import feature_matrix

FLEET = load_fleet(None)
FM = FLEET.features
TYPES = ["gateway", "camera", "meter", "pump_controller"]

heartbeat = st.fixed_dictionaries(
    {
        "cpu_pct": st.one_of(st.none(), st.floats(0, 100)),
        "mem_pct": st.floats(0, 100),
        "temperature_c": st.floats(-80, 250),
        "error_rate": st.floats(0, 1),
        "signal_quality": st.floats(0, 1),
        "uptime_s": st.floats(0, 1e7),
        "device_type": st.one_of(st.sampled_from(TYPES), st.just("toaster"), st.none()),
        "firmware": st.one_of(st.none(), st.sampled_from(["2.5.0", "6.0.0", "1.0"])),
    }
)
context = st.tuples(*[st.integers(0, 50) for _ in FLEET.context.names])


@given(st.lists(st.tuples(heartbeat, context), min_size=1, max_size=20))
def test_sources_give_the_matrix_the_worker_computes(rows):
    state = np.asarray([FM.state_row(hb) for hb, _ in rows], dtype=np.float64)
    ctx = np.asarray([c for _, c in rows], dtype=np.float64)
    expected = FM.build(state, ctx)
    cols = {k: [hb[k] for hb, _ in rows] for k in rows[0][0]}
    cols |= {name: [c[i] for _, c in rows] for i, name in enumerate(FLEET.context.names)}
    m = feature_matrix(FLEET, cols)
    assert m.from_sources and m.kept.all()
    np.testing.assert_array_equal(m.x, expected)
    assert m.coercions.unknown["device_type"] == sum(
        hb["device_type"] == "toaster" for hb, _ in rows
    )
    assert m.coercions.null["cpu_pct"] == sum(hb["cpu_pct"] is None for hb, _ in rows)


def _sources(n: int) -> dict[str, list]:
    cols: dict[str, list] = {
        "cpu_pct": [10.0] * n,
        "mem_pct": [20.0] * n,
        "temperature_c": [40.0] * n,
        "error_rate": [0.1] * n,
        "signal_quality": [0.9] * n,
        "uptime_s": [3600.0] * n,
        "device_type": ["camera"] * n,
        "firmware": ["6.0.0"] * n,
    }
    return cols | {name: [0] * n for name in FLEET.context.names}


def test_text_that_is_not_a_number_drops_its_row_and_says_so():
    cols = _sources(4)
    cols["mem_pct"][2] = "n/a"
    m = feature_matrix(FLEET, cols)
    assert m.kept.tolist() == [True, True, False, True] and len(m.x) == 3
    assert m.coercions.dropped == {"not a number in mem_pct": 1}
    assert any(
        "rows dropped (1): not a number in mem_pct 1" in line for line in m.coercions.lines()
    )


def test_a_null_context_value_is_what_a_device_without_such_events_has():
    cols = _sources(2)
    cols["hours_since_last_wo"] = [None, 5]
    m = feature_matrix(FLEET, cols)
    j = FM.names.index("log_hours_since_last_wo")
    assert m.x[0, j] == pytest.approx(np.log1p(2160.0))
    assert m.coercions.null["hours_since_last_wo"] == 1


def test_expanded_feature_columns_pass_through_and_a_null_drops_the_row():
    cols = {name: [1.0, 2.0, None] for name in FM.names}
    m = feature_matrix(FLEET, cols)
    assert not m.from_sources and m.kept.tolist() == [True, True, False]
    assert m.x.shape == (2, FM.width) and m.x.dtype == np.float32
    assert m.coercions.dropped == {"null in a feature column": 1} and not m.coercions.null


def test_a_table_with_neither_form_names_the_first_missing_column():
    cols = _sources(1)
    del cols["uptime_s"]
    with pytest.raises(ConfigError, match="no column 'uptime_s'"):
        feature_matrix(FLEET, cols)
