"""The device table: slots allocated in bulk (growing the columns), reset when reused."""

import numpy as np

from workers.state import DeviceTable


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
