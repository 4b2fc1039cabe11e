"""Shared fixtures. Unit tests need nothing; tests under tests/integration/ get the real local
stack (Kafka 4 + Redis), started once per session by the same launcher as the demo and CI, and
reused when it is already running."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parent.parent
NO_TIME_RETENTION = {"retention.ms": "-1"}

# No per-example deadline: CI shares 2 cores with Kafka and Redis, and a GC pause or a busy
# broker must not fail a property that holds (the properties, not the timing, are under test).
settings.register_profile("precast", deadline=None)
settings.load_profile("precast")

# The read API answers only the Host names of PRECAST_API__ALLOWED_HOSTS (loopback names by
# default, consumer_api.edge.host_allowlist): in-process test clients call it by one, as a local client does.
_TC_DEFAULTS = list(TestClient.__init__.__defaults__ or ())
_TC_DEFAULTS[_TC_DEFAULTS.index("http://testserver")] = "http://localhost"
TestClient.__init__.__defaults__ = tuple(_TC_DEFAULTS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack():
    from opsctl.settings import StackCliSettings
    from opsctl.stack import LocalStack
    from precast.settings import load

    # PRECAST_STACK__* (home, ports) apply, so several checkouts can share one running stack.
    settings = load(StackCliSettings).stack
    if "PRECAST_STACK__HOME" not in os.environ:
        settings = settings.model_copy(update={"home": ROOT / ".precast"})
    s = LocalStack(settings)
    s.up(progress=lambda m: print(m))
    return s


@pytest.fixture(scope="session")
def kafka_settings(stack):
    from precast.settings import KafkaSettings

    return KafkaSettings(bootstrap_servers=stack.bootstrap_servers, connect_timeout_s=10)


@pytest.fixture(scope="session")
def redis_settings(stack):
    from precast.settings import RedisSettings

    return RedisSettings(url=stack.redis_url, key_prefix=f"test-{uuid.uuid4().hex[:8]}:")


@pytest.fixture(scope="session")
def admin(kafka_settings):
    from precast.kafka import Admin

    a = Admin(kafka_settings)
    a.wait_reachable()
    return a


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Fresh names per test: topics, group ids, key prefixes never collide across tests."""
    token = uuid.uuid4().hex[:10]
    return lambda stem: f"{stem}-{token}"


@pytest.fixture
def topic_factory(admin, unique) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(stem: str = "t", partitions: int = 3, config: dict[str, str] | None = None) -> str:
        name = unique(f"test.{stem}")
        # Never trimmed by time: the broker's retention check (every 5 min) would otherwise
        # delete records stamped more than 7 days ago in the middle of a test.
        admin.create_topic(name, partitions, {**NO_TIME_RETENTION, **(config or {})})
        created.append(name)
        return name

    yield make
    admin.delete_topics(created)


@pytest.fixture
def topics(admin, unique):
    """A whole topic catalog under a unique prefix, ensured on the broker."""
    from schemas.topics import catalog

    cat = catalog(prefix=unique("test") + ".", partitions=3)
    admin.ensure_topics(list(cat))
    yield cat
    admin.delete_topics([t.name for t in cat])


@pytest.fixture(scope="session")
def redis_cluster_stack(tmp_path_factory):
    """A private Redis Cluster (3 masters + 3 replicas) on free ports, for this session only."""
    from opsctl.settings import StackSettings
    from opsctl.stack import LocalStack
    from opsctl.stack.process import free_port_block

    s = LocalStack(
        StackSettings(
            home=tmp_path_factory.mktemp("redis-cluster"),
            redis_cluster=True,
            redis_cluster_port=free_port_block(6, bus_offset=10_000, low=11_000),
        )
    )
    assert s.redis_cluster is not None
    s.redis_cluster.start()
    try:
        s.redis_cluster.wait_ready(60)
        yield s
    finally:
        s.redis_cluster.stop(hard=True)


@pytest.fixture(scope="session")
def redis_cluster_settings(redis_cluster_stack):
    from precast.settings import RedisSettings

    return RedisSettings(
        url=redis_cluster_stack.redis_url, cluster=True, key_prefix=f"test-{uuid.uuid4().hex[:8]}:"
    )


@pytest.fixture(params=["redis", "redis-cluster"])
def serving_redis(request):
    """Settings of a single Redis, then of a Redis Cluster: store tests run against both."""
    name = "redis_settings" if request.param == "redis" else "redis_cluster_settings"
    return request.getfixturevalue(name)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """A private 3-node KRaft cluster with its own Redis Cluster, on free ports, for the fault
    suite (slow tests only: three JVMs). Never the shared stack."""
    from opsctl.settings import StackSettings
    from opsctl.stack import LocalStack
    from opsctl.stack.process import free_port_block

    kafka_base = free_port_block(6)
    s = LocalStack(
        StackSettings(
            home=tmp_path_factory.mktemp("kafka-cluster"),
            brokers=3,
            kafka_port=kafka_base,
            controller_port=kafka_base + 1,
            redis_cluster=True,
            redis_cluster_port=free_port_block(6, bus_offset=10_000, low=11_000),
        )
    )
    try:
        s.up(progress=lambda m: print(m))
        yield s
    finally:
        s.down()


@pytest.fixture(scope="session")
def cluster_kafka_settings(kafka_cluster):
    from precast.settings import KafkaSettings

    return KafkaSettings(bootstrap_servers=kafka_cluster.bootstrap_servers, connect_timeout_s=10)


@pytest.fixture(scope="session")
def cluster_admin(cluster_kafka_settings):
    from precast.kafka import Admin

    a = Admin(cluster_kafka_settings)
    a.wait_reachable()
    return a


@pytest.fixture
def cluster_topics(cluster_admin, unique):
    """The topic catalog on the 3-broker cluster: replication factor 3, min.insync.replicas 2."""
    from schemas.topics import catalog

    cat = catalog(prefix=unique("test") + ".", partitions=6, replication_factor=3)
    cluster_admin.ensure_topics(list(cat))
    yield cat
    cluster_admin.delete_topics([t.name for t in cat])


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory):
    """A private secured Kafka (TLS + SASL/SCRAM + ACLs, no plaintext listener: `precast stack
    up --secure`) on free ports, for this session only; stopped at the end."""
    from opsctl.settings import StackSettings
    from opsctl.stack.process import free_port_block
    from opsctl.stack.secure import SecureStack
    from precast.settings import TopicSettings

    base = free_port_block(2)
    s = SecureStack(
        StackSettings(
            home=tmp_path_factory.mktemp("secure-stack"),
            secure_kafka_port=base,
            secure_controller_port=base + 1,
            kafka_heap="512m",
        )
    )
    try:
        s.up(progress=lambda m: print(m), topics=TopicSettings())
        yield s
    finally:
        s.down()
