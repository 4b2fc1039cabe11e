"""Two workers in a group under load; kill -9 one: after the rebalance every input record
(heartbeat, work order, alarm, precompute request) has a prediction whose lineage names it."""

import os
import signal
import time
from collections import Counter

import pytest

from opsctl.stack.process import free_port
from tests.integration.worker_support import (
    Load,
    assert_answered,
    explain_missing,
    input_offsets,
    lineage_refs,
    read_until_answered,
    spawn_worker,
    stop,
    wait_ready,
)


# slow: a fault scenario of ~16 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
def test_kill_9_one_of_two_workers_loses_no_trigger(kafka_settings, topics, unique, tmp_path):
    group = unique("workers")
    ports = free_port(), free_port()
    a = spawn_worker(
        kafka_settings, topics, group, tmp_path / "a.log", PRECAST_METRICS__PORT=str(ports[0])
    )
    b = spawn_worker(
        kafka_settings, topics, group, tmp_path / "b.log", PRECAST_METRICS__PORT=str(ports[1])
    )
    try:
        load = Load(kafka_settings, topics, seconds=6.0)
        load.start()
        for port in ports:  # both members hold partitions before one dies
            assert wait_ready(port)["assigned_partitions"] > 0
        time.sleep(1.0)
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        load.join(30)
        assert load.error is None and load.sent > 5_000
        inputs = input_offsets(kafka_settings, topics, unique("probe"))
        assert len(inputs) == load.sent
        expected, requests, preds = read_until_answered(
            kafka_settings, topics, inputs, unique("reader"), committed_only=False, timeout=90
        )
        assert_answered(
            expected,
            requests,
            set(lineage_refs(preds)),
            explain=lambda missing: (
                explain_missing(kafka_settings, missing, preds) + f"\nworker logs: {tmp_path}"
            ),
        )
        assert stop(b) == 0  # SIGTERM: drain, flush, commit, exit 0
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    dupes = sum(n - 1 for n in Counter(lineage_refs(preds)).values() if n > 1)
    triggers = Counter(p["trigger"] for p in preds)
    print(
        f"\n{len(expected)} inputs, {len(preds)} predictions {dict(triggers)}, "
        f"{dupes} re-predicted after the kill (at-least-once)"
    )
    assert {"heartbeat", "alarm", "api_miss"} <= set(
        triggers
    )  # a work order merges into its alarm here
    # Every prediction is keyed into the partition of its device's inputs (co-partitioning).
    assert all(r["partition"] == p["_partition"] for p in preds for r in p["lineage"])
    # The survivor committed everything it was given: nothing left for a restart to redo.
    from precast.kafka import Consumer, TopicPartitionOffset

    # the workers' group as the broker knows it: under the deployment's prefix
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    c = Consumer(kafka_settings.model_copy(update={"group_prefix": prefix}), group)
    parts = [TopicPartitionOffset(t, p) for t in {x[0] for x in expected} for p in range(3)]
    committed = {(x.topic, x.partition): max(x.offset, 0) for x in c.committed(parts)}
    highs = {(t, p): c.watermarks(t, p)[1] for t, p in committed}
    c.close()
    assert committed == highs
