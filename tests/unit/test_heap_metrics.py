"""precast.telemetry.heap: the heap gauges a soak reads to tell growing data from memory malloc keeps."""

from __future__ import annotations

import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from precast.telemetry.heap import malloc_bytes, register_heap_metrics


def _values() -> dict[str, float]:
    reg = CollectorRegistry()
    register_heap_metrics(reg)
    return {
        (s.name + (f"_{s.labels['state']}" if "state" in s.labels else "")): s.value
        for m in reg.collect()
        for s in m.samples
    }


def test_python_blocks_follow_live_objects():
    import gc

    # Other tests leave cyclic garbage: a collection triggered by the 50k new lists would free
    # it mid-measure and hide part of the growth (it failed so in the full suite).
    gc.collect()
    gc.disable()
    try:
        before = _values()["precast_python_heap_blocks"]
        kept = [[i] for i in range(50_000)]  # 50k small lists: pymalloc blocks
        after = _values()["precast_python_heap_blocks"]
    finally:
        gc.enable()
    assert after - before >= 50_000
    del kept


@pytest.mark.skipif(malloc_bytes() is None, reason="needs glibc >= 2.33")
def test_malloc_bytes_follow_a_large_allocation_and_its_release():
    # The count is the whole process's: threads that earlier tests left running allocate and
    # free meanwhile (a CI run saw 1,616 bytes less than the 32 MiB), so 1 MiB of slack; an
    # allocation the count missed would leave it near 0.
    slack = 1 << 20
    in_use, _ = malloc_bytes()  # type: ignore[misc]
    big = bytearray(32 << 20)  # past pymalloc: malloc (mmapped)
    grown, _ = malloc_bytes()  # type: ignore[misc]
    assert grown - in_use >= (32 << 20) - slack
    del big
    released, _ = malloc_bytes()  # type: ignore[misc]
    assert grown - released >= (32 << 20) - slack


def test_the_exposition_names_the_gauges():
    reg = CollectorRegistry()
    register_heap_metrics(reg)
    text = generate_latest(reg).decode()
    assert "# TYPE precast_python_heap_blocks gauge" in text
    if sys.platform.startswith("linux") and malloc_bytes() is not None:
        assert 'precast_malloc_bytes{state="in_use"}' in text
        assert 'precast_malloc_bytes{state="free"}' in text
