"""Background work below the read path: a thread's nice, what its new threads inherit, and the
read API's materializer with its Kafka clients (precast.priority, docs/api.md "Reads first")."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time

import pytest

from consumer_api.settings import ApiSettings
from precast import priority
from precast.settings import KafkaSettings, TopicSettings
from tests.sources import StillSource, built_materializer

pytestmark = pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no per-thread nice")


def _nice(tid: int) -> int | None:
    """The thread's nice; None once it has ended."""
    try:
        return os.getpriority(os.PRIO_PROCESS, tid)
    except ProcessLookupError:
        return None


def _on_thread(fn):
    """fn() on a fresh thread (so this process's own priority never changes); its result."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def _threads() -> dict[int, str]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except OSError:
            pass  # ended meanwhile
    return out


def test_a_lowered_thread_runs_at_that_nice_and_the_threads_it_starts_inherit_it():
    def lowered() -> tuple[bool, int, int]:
        done = priority.lower_this_thread(7)
        child: list[int] = []
        t = threading.Thread(target=lambda: child.append(priority.this_thread_nice()))
        t.start()
        t.join()
        return done, priority.this_thread_nice(), child[0]

    before = priority.this_thread_nice()
    assert _on_thread(lowered) == (True, max(7, before), max(7, before))
    assert priority.this_thread_nice() == before  # the caller's thread is untouched


def test_a_thread_already_lower_is_not_raised():
    def twice() -> int:
        priority.lower_this_thread(12)
        priority.lower_this_thread(5)  # raising it back would need CAP_SYS_NICE: never tried
        return priority.this_thread_nice()

    assert _on_thread(twice) == 12


def test_built_below_runs_the_build_lowered_and_leaves_the_caller_as_it_was():
    before = priority.this_thread_nice()
    seen: list[int] = []

    def build() -> str:
        seen.append(priority.this_thread_nice())
        return "client"

    assert priority.built_below(9, build) == "client"
    assert seen == [max(9, before)]
    assert priority.this_thread_nice() == before


def test_built_below_hands_the_builds_exception_to_the_caller():
    def build() -> None:
        raise KeyError("no such broker")

    with pytest.raises(KeyError, match="no such broker"):
        priority.built_below(4, build)


def test_nice_zero_builds_on_the_callers_thread():
    assert priority.built_below(0, threading.get_native_id) == threading.get_native_id()


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_nice_outside_0_to_19_is_refused(nice):
    with pytest.raises(ValueError, match="0-19"):
        priority.lower_this_thread(nice)


def test_a_refused_priority_is_one_log_line_and_the_work_goes_on(monkeypatch, caplog):
    def refuse(*_: object) -> None:
        raise PermissionError("operation not permitted")

    monkeypatch.setattr(priority.os, "setpriority", refuse)
    monkeypatch.setattr(priority, "_warned", threading.Event())
    with caplog.at_level(logging.WARNING, logger="precast.priority"):
        results = [_on_thread(lambda: priority.lower_this_thread(15)) for _ in range(3)]
        assert priority.built_below(15, lambda: "built") == "built"
    assert results == [False, False, False]
    lines = [r for r in caplog.records if r.name == "precast.priority"]
    assert len(lines) == 1 and "operation not permitted" in lines[0].getMessage()


def test_the_materializer_and_its_kafka_clients_threads_run_below_the_reads():
    settings = ApiSettings(
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"),  # nothing is ever read
        topics=TopicSettings(prefix="nice."),
        api={"background_nice": 8, "local_view": True, "gate": False},
    )
    gc.collect()  # clients earlier tests dropped close now, not while threads are counted
    before = _threads()
    mat = built_materializer(settings)
    # librdkafka starts its main thread and one per bootstrap broker as a client is built
    started = {tid: name for tid, name in _threads().items() if tid not in before}
    clients = {tid: name for tid, name in started.items() if name.startswith("rdk:")}
    real = mat._source
    mat._source = StillSource(0.01)
    mat._thread.start()
    try:
        deadline = time.monotonic() + 5
        while mat._thread.native_id is None or (_nice(mat._thread.native_id) or 0) < 8:
            assert time.monotonic() < deadline, "the materializer's thread was not lowered"
            time.sleep(0.01)
        # The consumer's and the letters producer's live as long as they do: a main and a
        # broker thread each at least. (A thread of an earlier test's client may end meanwhile.)
        alive = {tid: n for tid in clients if (n := _nice(tid)) is not None}
        assert len(alive) >= 4, started
        assert alive == {tid: 8 for tid in alive}
        assert priority.this_thread_nice() < 8  # the reads' threads stay where they were
    finally:
        mat._stop.set()
        mat._thread.join(5)
        real.close()
        if mat._producer is not None:
            mat._producer.flush(1)
