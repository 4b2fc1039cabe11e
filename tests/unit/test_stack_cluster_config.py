"""The 3-node stack's node configuration, read back from what the launcher writes (no JVM
started): one voter set all nodes agree on, distinct ports and folders, replication 3 / min ISR
2 for internal topics; the single node keeps its layout. And the settings that guard it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from opsctl.settings import StackSettings
from opsctl.stack import LocalStack
from opsctl.stack.kafka_node import KafkaNode
from precast.errors import ConfigError
from precast.settings import RedisSettings, load


def props(node: KafkaNode) -> dict[str, str]:
    text = node.write_config().read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_three_nodes_share_one_voter_set_and_replicate_internal_topics(tmp_path):
    s = StackSettings(home=tmp_path, brokers=3, kafka_port=30000, controller_port=30001)
    nodes = LocalStack(s).brokers
    configs = [props(n) for n in nodes]
    voters = "1@127.0.0.1:30001,2@127.0.0.1:30003,3@127.0.0.1:30005"
    assert [c["controller.quorum.voters"] for c in configs] == [voters] * 3
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    assert [c["advertised.listeners"] for c in configs] == [
        f"PLAINTEXT://127.0.0.1:{p}" for p in (30000, 30002, 30004)
    ]
    assert len({c["log.dirs"] for c in configs}) == 3
    for c in configs:
        assert c["offsets.topic.replication.factor"] == "3"
        assert c["transaction.state.log.replication.factor"] == "3"
        assert c["min.insync.replicas"] == c["transaction.state.log.min.isr"] == "2"
        assert "controller.quorum.bootstrap.servers" not in c
    assert LocalStack(s).bootstrap_servers == "127.0.0.1:30000,127.0.0.1:30002,127.0.0.1:30004"
    assert LocalStack(s).client_env()["PRECAST_TOPICS__REPLICATION_FACTOR"] == "3"


def test_single_node_keeps_its_folder_ports_and_dynamic_quorum(tmp_path):
    node = LocalStack(StackSettings(home=tmp_path)).kafka
    c = props(node)
    assert node.dir == tmp_path.resolve() / "kafka" and node.proc.name == "Kafka broker"
    assert c["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert c["offsets.topic.replication.factor"] == "1" and c["min.insync.replicas"] == "1"


def test_broker_count_is_one_or_three(monkeypatch):
    monkeypatch.setenv("PRECAST_STACK__BROKERS", "2")
    from opsctl.settings import StackCliSettings

    with pytest.raises(ConfigError, match="PRECAST_STACK__BROKERS"):
        load(StackCliSettings)


def test_key_prefix_with_braces_is_refused():
    # a brace in the prefix would become the Redis Cluster hash tag: every key in one slot
    with pytest.raises(ValueError, match="braces"):
        RedisSettings(key_prefix="precast{x}:")


def test_brokers_flag_refuses_other_counts_in_one_line():
    run = subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "stack", "up", "--brokers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PRECAST_STACK__HOME": "/nonexistent-never-used"},
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "--brokers" in run.stderr


def test_cluster_nodes_fence_a_dead_node_in_3_s_and_a_single_node_keeps_kafkas_default(tmp_path):
    # The failover time of docs/cluster.md rests on these: fenced 3 s after the last heartbeat,
    # heartbeats every 500 ms (six may be missed before a live node is fenced).
    s = StackSettings(home=tmp_path, brokers=3, kafka_port=30000, controller_port=30001)
    for c in (props(n) for n in LocalStack(s).brokers):
        assert c["broker.session.timeout.ms"] == "3000"
        assert c["broker.heartbeat.interval.ms"] == "500"
        assert int(c["broker.session.timeout.ms"]) >= 6 * int(c["broker.heartbeat.interval.ms"])
    single = props(LocalStack(StackSettings(home=tmp_path / "one")).brokers[0])
    assert "broker.session.timeout.ms" not in single


def test_every_kafka_client_refreshes_metadata_every_500_ms_unless_told_otherwise():
    from precast.kafka.config import admin_config, consumer_config, producer_config
    from precast.settings import KafkaSettings

    plain = KafkaSettings()
    for conf in (producer_config(plain), consumer_config(plain, "g"), admin_config(plain)):
        assert conf["topic.metadata.refresh.interval.ms"] == 500
    mine = KafkaSettings(extra={"topic.metadata.refresh.interval.ms": 60_000})
    assert producer_config(mine)["topic.metadata.refresh.interval.ms"] == 60_000
    assert consumer_config(mine, "g")["topic.metadata.refresh.interval.ms"] == 60_000
