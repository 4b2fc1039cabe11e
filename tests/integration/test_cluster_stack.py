"""`precast stack up --brokers 3 --redis-cluster` in a scratch home on free ports (never the
shared stack): three KRaft nodes, a Redis Cluster, the contract topics with replication factor 3
and min.insync.replicas 2 through the ordinary `precast topics ensure`, and `down` stops all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from opsctl.stack.process import free_port_block
from precast.kafka import Admin
from precast.redis_client import close as redis_close
from precast.serving import RedisStore
from precast.settings import KafkaSettings, RedisSettings

pytestmark = pytest.mark.slow


def precast(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opsctl.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_three_broker_stack_with_redis_cluster_via_the_cli(tmp_path, unique):
    base = free_port_block(6)
    env = {
        **os.environ,
        "PRECAST_STACK__HOME": str(tmp_path),
        "PRECAST_STACK__PROMETHEUS": "false",  # its fixed port belongs to the shared stack
        "PRECAST_STACK__KAFKA_PORT": str(base),
        "PRECAST_STACK__CONTROLLER_PORT": str(base + 1),
        "PRECAST_STACK__REDIS_CLUSTER_PORT": str(free_port_block(6, bus_offset=10_000, low=11_000)),
    }
    try:
        up = precast(env, "stack", "up", "--brokers", "3", "--redis-cluster")
        assert up.returncode == 0, up.stderr
        exports = up.stdout.strip().splitlines()[-1].removeprefix("point the apps at it: export ")
        apps = dict(pair.split("=", 1) for pair in exports.split())
        bootstrap = apps["PRECAST_KAFKA__BOOTSTRAP_SERVERS"]
        assert bootstrap == ",".join(f"127.0.0.1:{base + 2 * i}" for i in range(3))
        assert apps["PRECAST_REDIS__CLUSTER"] == "true"
        assert apps["PRECAST_TOPICS__REPLICATION_FACTOR"] == "3"

        # `up` again reuses the healthy cluster; `status` names nine healthy processes
        again = precast(env, "stack", "up", "--brokers", "3", "--redis-cluster")
        assert again.returncode == 0, again.stderr
        status_env = {**env, "PRECAST_STACK__BROKERS": "3", "PRECAST_STACK__REDIS_CLUSTER": "true"}
        status = precast(status_env, "stack", "status")
        assert status.returncode == 0, status.stdout
        assert status.stdout.count(" healthy ") == 9

        # a single-node `up` in the same home refuses to mix layouts
        mixed = precast(env, "stack", "up")
        assert mixed.returncode != 0 and "stack down" in mixed.stderr

        prefix = unique("rf") + "."
        ensure = precast({**env, **apps, "PRECAST_TOPICS__PREFIX": prefix}, "topics", "ensure")
        assert ensure.returncode == 0, ensure.stderr
        admin = Admin(KafkaSettings(bootstrap_servers=bootstrap))
        assert admin.wait_reachable() == 3
        heartbeats = prefix + "heartbeats"
        layout = admin.partition_replicas(heartbeats)
        assert len(layout) == 6
        assert all(len(p.replicas) == 3 and len(p.in_sync) == 3 for p in layout)
        assert {p.leader for p in layout} == {1, 2, 3}  # leadership spread over the nodes
        assert admin.topic_config(heartbeats)["min.insync.replicas"] == "2"

        store = RedisStore.from_settings(
            RedisSettings(url=apps["PRECAST_REDIS__URL"], cluster=True, key_prefix="t:")
        )
        nodes = store.client.cluster_nodes()
        redis_close(store.client)
        flags = sorted(n["flags"].split(",")[-1] for n in nodes.values())
        assert flags == ["master"] * 3 + ["slave"] * 3, nodes
    finally:
        down = precast(env, "stack", "down")  # stops whatever layout runs in this home
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("Kafka broker") == 3 and down.stdout.count("Redis") == 6
