"""The device table: slots allocated in bulk (growing the columns), reset when reused."""

import numpy as np

from precast.fleet import load_fleet
from workers.precompute.state import changelog
from workers.precompute.state.device_table import DeviceTable


def test_new_devices_get_distinct_fresh_slots_with_their_partition_and_the_table_grows():
    t = DeviceTable(capacity=16)
    devices = [f"d{i}" for i in range(40)] + ["d3", "d0"]  # repeats keep their first slot
    s = t.slots(devices, [i % 3 for i in range(42)])
    assert len(set(s[:40].tolist())) == 40 and s[40] == s[3] and s[41] == s[0]
    assert len(t.hb) >= 40 and t.partition[s[:40]].tolist() == [i % 3 for i in range(40)]
    assert (t.hb_time[s] == -1).all() and (t.valid_until[s] == -1).all()
    assert t.slots(["d5"], [9]).tolist() == [s[5]] and t.partition[s[5]] == 2  # known: unchanged


def test_a_slot_freed_by_a_revoked_partition_comes_back_empty():
    t = DeviceTable(capacity=16)
    (a,) = t.slots(["a"], [1])
    t.hb_time[a], t.valid_until[a], t.last_x[a] = 5, 6, 1.0
    t.forget_partitions([1])
    assert "a" not in t
    (b,) = t.slots(["b"], [2])
    assert b == a and t.hb_time[b] == -1 and t.valid_until[b] == -1 and not np.any(t.last_x[b])


LAYOUT = changelog.Layout(load_fleet().features)


def test_changelog_records_round_trip_newest_per_device_and_skip_bad_ones():
    rows = 3
    s = len(load_fleet().features.state)
    hb = np.arange(rows * s, dtype=np.float64).reshape(rows, s)
    x = np.ones((rows, LAYOUT.dtype["last_x"].shape[0]), dtype=np.float32)
    t = np.array([100, 200, 300], dtype=np.int64)
    values = LAYOUT.encode(t, t, 7, t + 5_000, hb, x)
    assert all(len(v) == LAYOUT.size for v in values)
    keys = [b"a", b"b", b"a", b"c", None, b"d"]
    devices, rec, bad, foreign = LAYOUT.decode(
        keys, [values[0], values[1], values[2], None, values[0], b"\x01short"]
    )
    assert bad == 2 and foreign == 0  # a keyless record and one of the wrong size
    assert devices == ["b", "a"]  # "a" twice: the newest (t=300) stands; "c" was a tombstone
    assert rec["hb_time"].tolist() == [200, 300] and rec["produced_at"].tolist() == [7, 7]
    assert rec["hb"][1].tolist() == hb[2].tolist()


def test_records_written_under_another_spec_are_skipped_not_misread():
    """Another spec's feature hash in a record: its device starts over (first seen), and no
    older record of this spec for the device stands in for it either."""
    t = np.array([100], dtype=np.int64)
    s, f = len(load_fleet().features.state), LAYOUT.dtype["last_x"].shape[0]
    mine = LAYOUT.encode(t, t, 7, t + 5_000, np.zeros((1, s)), np.zeros((1, f), dtype=np.float32))
    theirs = bytearray(mine[0])
    theirs[1:9] = b"\xff" * 8  # the spec tag of another spec, same layout otherwise
    devices, rec, bad, foreign = LAYOUT.decode(
        [b"a", b"a", b"b"], [mine[0], bytes(theirs), mine[0]]
    )
    assert devices == ["b"] and bad == 0 and foreign == 1


def test_restore_fills_the_table_so_state_is_as_before_the_restart():
    before = DeviceTable()
    s = before.slots(["a", "b"], [0, 1])
    before.hb[s] = 1.5
    before.hb_time[s] = [10, 20]
    before.valid_until[s] = [5_010, 5_020]
    before.computed_at[s] = [10, 20]
    before.predicted_at[s] = [11, 21]
    before.last_x[s] = 0.25
    values = LAYOUT.encode(
        before.hb_time[s],
        before.computed_at[s],
        before.predicted_at[s],
        before.valid_until[s],
        before.hb[s],
        before.last_x[s],
    )
    devices, rec, _, _ = LAYOUT.decode([b"a", b"b"], values)
    after = DeviceTable()
    after.restore(devices, [0, 1], rec)
    r = after.slots(["a", "b"], [0, 1])
    for col in ("hb", "hb_time", "valid_until", "computed_at", "predicted_at", "last_x"):
        assert np.array_equal(getattr(after, col)[r], getattr(before, col)[s]), col
    assert after.has_data("a") and not after.has_data("nobody")
