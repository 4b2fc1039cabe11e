"""Exactly-once mode: kill -9 a worker mid-transaction under load (it has one open with records
when the kill comes, and the log then holds aborted records); a read_committed reader then sees
every input record in exactly one prediction's lineage: none lost, none twice."""

import os
import signal
import time
import urllib.request
from collections import Counter

import pytest

from opsctl.stack.process import free_port
from tests.integration.worker_support import (
    Load,
    assert_answered,
    explain_missing,
    input_offsets,
    lineage_refs,
    read_predictions,
    read_until_answered,
    spawn_worker,
    stop,
    superseded,
    wait_ready,
)

EOS = {
    "PRECAST_WORKER__EXACTLY_ONCE": "true",
    "PRECAST_WORKER__TRANSACTION_TIMEOUT_MS": "5000",
    "PRECAST_WORKER__COMMIT_INTERVAL_MS": "1000",
}


def metric(port: int, name: str) -> int:
    """One unlabelled metric of a worker."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return 0


def truncated(port: int) -> int:
    """A worker's precast_worker_lineage_truncated_total."""
    return metric(port, "precast_worker_lineage_truncated_total")


# Records in a's open transaction before the kill: batches produced a few ms before are on the
# broker by then (linger 0), so the kill leaves an aborted transaction with records in the log.
OPEN_RECORDS = 20


def open_transaction(port: int, timeout: float = 20.0) -> int:
    """Wait until the worker has a transaction open with at least OPEN_RECORDS records in it;
    returns how many (0 when it never had one within `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = metric(port, "precast_worker_transaction_open_records")
        if n >= OPEN_RECORDS:
            return n
        time.sleep(0.01)
    return 0


# slow: a fault scenario of ~20 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
def test_kill_9_mid_transaction_leaves_no_duplicates_for_read_committed(
    kafka_settings, topics, unique, tmp_path
):
    group = unique("eos")
    ports = free_port(), free_port()
    a = spawn_worker(
        kafka_settings,
        topics,
        group,
        tmp_path / "a.log",
        **EOS,
        PRECAST_METRICS__PORT=str(ports[0]),
    )
    b = spawn_worker(
        kafka_settings,
        topics,
        group,
        tmp_path / "b.log",
        **EOS,
        PRECAST_METRICS__PORT=str(ports[1]),
    )
    try:
        load = Load(kafka_settings, topics, seconds=6.0)
        load.start()
        for port in ports:  # both members hold partitions before one dies
            assert wait_ready(port)["assigned_partitions"] > 0
        time.sleep(1.5)  # into the load: a's transactions carry its predictions
        cut = truncated(ports[0])  # what a leaves out of lineage by design, until it dies
        in_flight = open_transaction(ports[0])
        os.kill(a.pid, signal.SIGKILL)  # right away: mid-transaction, records on the broker
        assert in_flight >= OPEN_RECORDS, "worker a never had a transaction open with records"
        a.wait(10)
        load.join(30)
        assert load.error is None
        inputs = input_offsets(kafka_settings, topics, unique("probe"))
        expected, requests, committed = read_until_answered(
            kafka_settings, topics, inputs, unique("rc"), committed_only=True, timeout=100
        )
        cut += truncated(ports[1])
        assert stop(b) == 0
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    refs = Counter(lineage_refs(committed))
    # A device with more triggers waiting than a prediction names (LINEAGE_MAX) loses its oldest
    # heartbeats from lineage, then its oldest events, each superseded by a newer one it names:
    # a backlog's first batch can hold every work order and alarm of an event device. Those,
    # and no more than the workers counted, may be missing; any other input must be in a
    # committed prediction.
    inputs_cut = {topics.heartbeats.name, topics.work_orders.name, topics.alarms.name}
    cut_out = superseded(kafka_settings, expected - set(refs), committed, inputs_cut)
    assert len(cut_out) <= cut, (len(cut_out), cut)
    assert_answered(
        expected - cut_out,
        requests,
        set(refs),
        lambda missing: (
            explain_missing(kafka_settings, missing, committed) + f"\nworker logs: {tmp_path}"
        ),
    )
    twice = {k: n for k, n in refs.items() if n > 1}
    assert not twice, f"{len(twice)} inputs predicted more than once, e.g. {list(twice)[:3]}"
    everything = read_predictions(
        kafka_settings,
        topics.predictions.name,
        3,
        unique("ru"),
        committed_only=False,
        until=lambda p: True,
        timeout=20,
        quiet_s=1.0,
    )
    aborted = len(everything) - len(committed)
    # the kill came mid-transaction: its records are in the log, hidden from read_committed
    assert aborted > 0, f"no aborted records: a had {in_flight} in its open transaction"
    print(
        f"\n{len(expected)} inputs -> {len(committed)} committed predictions, each input exactly once; "
        f"{aborted} records of aborted transactions hidden from read_committed "
        f"(a had {in_flight} in its open transaction when killed); "
        f"{len(cut_out)} superseded inputs left out of lineage (workers counted {cut})"
    )
