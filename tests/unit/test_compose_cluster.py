"""compose/docker-compose.cluster.yml cannot run here (no Docker engine), so check it by reading:
three KRaft voters that agree with each other, replication settings the topic catalog expects, a
Redis Cluster the store's cluster client can use, several workers and API replicas behind the
proxy, and every PRECAST_* variable a real setting of the process it configures."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from consumer_api.settings import ApiSettings
from opsctl.settings import StackCliSettings, StackSettings
from producers.settings import SimulatorSettings
from tests.unit.compose_support import interpolate
from workers.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = interpolate(yaml.safe_load((ROOT / "compose" / "docker-compose.cluster.yml").read_text()))
SERVICES = COMPOSE["services"]
NGINX = (ROOT / "compose" / "nginx-cluster.conf").read_text()
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
SETTINGS_OF: dict[str, type[BaseModel]] = {
    "precast": StackCliSettings,
    "precast-simulator": SimulatorSettings,
    "precast-worker": WorkerSettings,
    "precast-api": ApiSettings,
}
KAFKA = sorted(n for n in SERVICES if re.fullmatch(r"kafka-\d", n))
REDIS = sorted(n for n in SERVICES if re.fullmatch(r"redis-\d", n))
PRECAST = {
    n: s
    for n, s in SERVICES.items()
    if s.get("image", "").startswith("precast") and s["command"][0] != "python"  # proxy-tls
}


def settings_of(svc: dict) -> BaseModel:
    """Build the process's settings from the service's environment (as pydantic-settings
    would from PRECAST_A__B variables); unknown names and bad values raise."""
    nested: dict = {}
    for key, value in svc["environment"].items():
        if not key.startswith("PRECAST_"):
            continue
        parts = key.removeprefix("PRECAST_").lower().split("__")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = value
    command = svc["command"][0]
    if command == "sh":  # kafka-init: `precast ...` commands in a shell script
        command = "precast"
    return SETTINGS_OF[command].model_validate(nested)


def test_three_kafka_voters_agree():
    assert len(KAFKA) == StackSettings(brokers=3).brokers
    envs = [SERVICES[n]["environment"] for n in KAFKA]
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert voters == {
        ",".join(f"{e['KAFKA_NODE_ID']}@{n}:9093" for n, e in zip(KAFKA, envs, strict=True))
    }
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    assert sorted(e["KAFKA_NODE_ID"] for e in envs) == ["1", "2", "3"]
    for name, e in zip(KAFKA, envs, strict=True):
        assert e["KAFKA_ADVERTISED_HOST"] == name
        props = dict(ln.split("=", 1) for ln in e["KAFKA_PROPERTIES"].splitlines() if ln)
        assert props["offsets.topic.replication.factor"] == "3"
        assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == "2"
        assert SERVICES[name]["entrypoint"] == ["/bin/sh", "/opt/precast/kafka-sasl.sh"]
        image_version = SERVICES[name]["image"].split(":")[1]
        assert image_version == StackSettings().kafka_version  # the local stack's Kafka


@pytest.mark.parametrize("name", sorted(PRECAST))
def test_precast_services_point_at_the_whole_topology(name):
    svc = PRECAST[name]
    assert svc["command"][0] in SCRIPTS or svc["command"][:2] == ["sh", "-c"]
    s = settings_of(svc)
    assert s.kafka.bootstrap_servers.split(",") == [f"{k}:9092" for k in KAFKA]
    assert s.kafka.security_protocol == "SASL_PLAINTEXT"
    assert s.topics.replication_factor == len(KAFKA)
    if name == "api":  # the only one that uses Redis, and the only one with its password
        assert s.redis.cluster
        assert re.match(rf"redis://:[^@]+@({'|'.join(REDIS)}):6379", s.redis.url)
    else:
        assert "PRECAST_REDIS__URL" not in svc["environment"]


def test_redis_cluster_nodes_and_init():
    assert len(REDIS) == 6
    for n in REDIS:
        cmd = SERVICES[n]["command"]
        assert cmd[cmd.index("--cluster-enabled") + 1] == "yes"
    init = " ".join(SERVICES["redis-cluster-init"]["command"])
    assert all(n in init for n in REDIS) and "--cluster-replicas 1" in init
    assert set(SERVICES["redis-cluster-init"]["depends_on"]) == set(REDIS)


def test_workers_and_api_replicas_behind_the_proxy():
    partitions = settings_of(SERVICES["worker"]).topics.partitions
    workers = SERVICES["worker"]["deploy"]["replicas"]
    assert 2 <= workers <= partitions  # a worker past the partition count would idle
    api = SERVICES["api"]
    assert api["deploy"]["replicas"] >= 2 and "ports" not in api  # reached through the proxy
    s = settings_of(api)
    assert not s.api.local_view  # replicas share the Redis Cluster, none keeps its own view
    assert re.search(rf"server api:{s.api.port}\b", NGINX)
    assert "proxy_next_upstream error" in NGINX  # a dead replica's requests go to the other
    assert SERVICES["proxy"]["depends_on"] == {
        "api": {"condition": "service_healthy"},
        "proxy-tls": {"condition": "service_completed_successfully"},
    }
    assert f":{s.api.port}/readyz" in " ".join(api["healthcheck"]["test"])
