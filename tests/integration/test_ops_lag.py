"""`precast lag`: lag per group and partition, in records and in time."""

from __future__ import annotations

import json
import time

from precast.kafka import Consumer, TopicPartitionOffset
from tests.integration.ops_support import cli_env, precast, produce


def test_lag_in_records_and_time(kafka_settings, topic_factory, unique, tmp_path, topics):
    topic = topic_factory("lag", 2)
    now = int(time.time() * 1000)
    # Partition 0: 50 records from two minutes ago; partition 1: 30 from one minute ago.
    produce(
        kafka_settings,
        topic,
        [(0, b"dev-1", b"x", [], now - 120_000 + 10 * i) for i in range(50)]
        + [(1, b"dev-2", b"y", [], now - 60_000 + 10 * i) for i in range(30)],
    )
    group = unique("lag-group")
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    # in the deployment's group namespace, where `precast lag` looks (KafkaSettings.group_prefix)
    c = Consumer(kafka_settings.model_copy(update={"group_prefix": prefix}), group)
    c.commit(
        [TopicPartitionOffset(topic, 0, 10), TopicPartitionOffset(topic, 1, 30)], asynchronous=False
    )
    c.close()
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
        PRECAST_REDIS__URL="",
    )
    before = time.time() * 1000
    out = precast(env, "lag", "--group", group, "--json")
    after = time.time() * 1000
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert (rows[0]["committed"], rows[0]["end"], rows[0]["lag"]) == (10, 50, 40)
    # record 10's age at some moment of the command, however long a busy machine made it
    stamp = now - 120_000 + 100
    assert (before - stamp) / 1000 - 0.5 <= rows[0]["lag_s"] <= (after - stamp) / 1000 + 0.5
    assert rows[1]["lag"] == 0 and rows[1]["lag_s"] is None
    assert doc["freshness"]["topic"]["empty_partitions"] == [0, 1, 2]  # no predictions yet

    text = precast(env, "lag", "--group", group, "--no-freshness")
    assert text.returncode == 0, text.stderr
    summary = next(ln.split() for ln in text.stdout.splitlines() if ln.startswith(group))
    assert summary[-2] == "40" and summary[-1].endswith(("s", "min"))
