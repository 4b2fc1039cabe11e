"""The micro-batcher's edges: size, delay, preferred sizes, coalescing, forced drain."""

import pytest

from workers.precompute.decide.batching import MicroBatcher


def filled(n, max_batch=4, delay=0.010, preferred=(), t=0.0):
    b = MicroBatcher(max_batch, delay, preferred)
    for i in range(n):
        b.add(f"d{i}", i, t)
    return b


def test_closes_at_max_size_without_waiting():
    b = filled(4)
    assert b.ready(0.0)
    assert b.take(0.0) == ([0, 1, 2, 3], 0.0)
    assert len(b) == 0


def test_one_below_max_waits_for_the_delay_then_takes_all():
    b = filled(3)
    assert not b.ready(0.0099)
    assert b.take(0.0099) == ([], 0.0)
    assert b.wait_s(0.004) == pytest.approx(0.006)
    assert b.ready(0.010)
    items, delay = b.take(0.012)
    assert items == [0, 1, 2] and delay == pytest.approx(0.012)


def test_more_than_max_is_cut_into_max_sized_batches_in_arrival_order():
    b = filled(10)
    assert b.take(0.0)[0] == [0, 1, 2, 3]
    assert b.take(0.0)[0] == [4, 5, 6, 7]
    assert b.take(0.0)[0] == []  # 2 left, delay not reached
    assert b.take(1.0)[0] == [8, 9]


def test_zero_delay_means_every_poll_closes_a_batch():
    b = filled(1, delay=0.0)
    assert b.ready(0.0) and b.take(0.0)[0] == [0]


def test_preferred_size_closes_early_with_the_largest_fitting_size():
    b = filled(7, max_batch=16, preferred=(2, 4, 8))
    assert b.ready(0.0)
    assert b.take(0.0)[0] == [0, 1, 2, 3]
    assert b.take(0.0)[0] == [4, 5]
    assert b.take(0.0)[0] == []  # 1 left: below every preferred size, waits for the delay
    assert b.take(0.02)[0] == [6]


def test_coalescing_keeps_place_and_age_and_merges():
    b = MicroBatcher(10, 0.010)
    b.add("a", [1], 0.0)
    b.add("b", [2], 0.005)
    assert b.add("a", [3], 0.009, merge=lambda old, new: old + new) is False
    assert len(b) == 2
    assert b.oldest_wait(0.010) == pytest.approx(0.010)  # a's age counts from its first trigger
    assert b.take(0.010)[0] == [[1, 3], [2]]


def test_forced_take_drains_regardless_of_delay_and_empty_is_inf_wait():
    b = filled(2)
    assert b.take(0.0, force=True)[0] == [0, 1]
    assert b.wait_s(0.0) == float("inf")
    assert b.take(0.0, force=True) == ([], 0.0)


@pytest.mark.parametrize("args", [(0, 0.01, ()), (4, -1, ()), (4, 0.01, (8,)), (4, 0.01, (0,))])
def test_bad_configuration_is_refused(args):
    with pytest.raises(ValueError):
        MicroBatcher(*args)


def test_add_new_queues_in_bulk_and_refuses_keys_already_waiting():
    b = filled(2, max_batch=10)
    assert b.isdisjoint(["x", "y"]) and not b.isdisjoint(["x", "d1"])
    b.add_new(["x", "y"], ["X", "Y"], 0.0)
    assert list(b) == [0, 1, "X", "Y"]
    with pytest.raises(ValueError):
        b.add_new(["z", "d0"], ["Z", "D"], 0.0)
    with pytest.raises(ValueError):
        b.add_new(["z", "z"], ["Z", "Z"], 0.0)
    assert list(b) == [0, 1, "X", "Y"]  # a refused call changes nothing
    assert b.take(1.0)[0] == [0, 1, "X", "Y"]
