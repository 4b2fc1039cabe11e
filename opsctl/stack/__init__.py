"""The local development stack on loopback: one Kafka 4 (KRaft) broker and one Redis by default;
three combined broker/controller nodes (`brokers=3`) and/or a Redis Cluster (`redis_cluster`)
on request, through the same code paths; plus Prometheus when asked (`up(prometheus=True)`:
`precast stack up` and the demo do, tests that need it start a private one).

`LocalStack.up()` is idempotent: a healthy stack started earlier from the same home folder is
reused (a node that died is started again). `down()` stops only processes whose pid files it
wrote, of either layout. Tests, the demo and CI all use this same launcher.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from opsctl.settings import StackSettings
from opsctl.stack.jaeger_node import JaegerNode, ensure_jaeger
from opsctl.stack.kafka_node import KafkaNode
from opsctl.stack.prometheus_node import PrometheusNode, RedisExporterNode
from opsctl.stack.redis_cluster import RedisClusterNodes
from opsctl.stack.redis_node import RedisNode
from opsctl.stack.varnish_node import VarnishExporterNode, VarnishNode
from precast.errors import StackError

# What `down(only=...)` and `running()` name: one entry per kind of process the stack starts
# ("kafka" is every broker, "redis" the single Redis and every Redis Cluster node).
COMPONENTS = ("edge", "jaeger", "prometheus", "redis-exporter", "kafka", "redis")


Node = (
    KafkaNode
    | RedisNode
    | PrometheusNode
    | RedisExporterNode
    | JaegerNode
    | VarnishNode
    | VarnishExporterNode
)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    state: str  # "healthy" | "unhealthy" | "stopped"
    pid: int | None
    address: str


class LocalStack:
    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings.model_copy(
            update={
                "home": Path(settings.home).expanduser().resolve(),
                "jar_cache": Path(settings.jar_cache).expanduser().resolve(),
            }
        )
        self.brokers = [KafkaNode(self.settings, i) for i in range(self.settings.brokers)]
        self.kafka = self.brokers[0]
        self.redis = RedisNode(self.settings)
        self.prometheus = PrometheusNode(self.settings)
        self.redis_exporter = RedisExporterNode(self.settings)
        self.jaeger = JaegerNode(self.settings)
        self.edge = VarnishNode(self.settings)
        self.edge_exporter = VarnishExporterNode(self.settings, self.edge)
        # Built either way, so `down` also stops a Redis Cluster started with the flag.
        self._cluster_nodes = RedisClusterNodes(self.settings)
        self.redis_cluster = self._cluster_nodes if self.settings.redis_cluster else None
        # The other layout's nodes in this home: `down` stops them too, `up` refuses to mix.
        other = self.settings.model_copy(update={"brokers": 4 - self.settings.brokers})
        self._other_brokers = [KafkaNode(other, i) for i in range(other.brokers)]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def redis_url(self) -> str:
        return self.redis_cluster.url if self.redis_cluster else self.redis.url

    def client_env(self) -> dict[str, str]:
        """The PRECAST_* variables that point the apps at this stack (and at its Jaeger, when
        one runs: every process then traces into it)."""
        env = {
            "PRECAST_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "PRECAST_REDIS__URL": self.redis_url,
            "PRECAST_REDIS__CLUSTER": "true" if self.redis_cluster else "false",
            "PRECAST_TOPICS__REPLICATION_FACTOR": str(self.settings.brokers),
        }
        if self.edge.running():
            # The API replicas purge it; its X-Forwarded-For names the client (loopback).
            env["PRECAST_EDGE__PURGE_URLS"] = json.dumps([self.edge.url])
            # leased answers stay at the edge while the replicas watch their leases
            env["PRECAST_EDGE__LEASE_TTL_S"] = "30"
            env["PRECAST_API__TRUSTED_PROXIES"] = '["127.0.0.1/32", "::1/128"]'
        if self.jaeger.running():
            env["PRECAST_TRACING__ENABLED"] = "true"
            env["PRECAST_TRACING__ENDPOINT"] = self.jaeger.otlp_endpoint
        return env

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialize up/down across processes (parallel test sessions share one stack)."""
        self.settings.home.mkdir(parents=True, exist_ok=True)
        with open(self.settings.home / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _redis_part(self) -> RedisNode | RedisClusterNodes:
        return self.redis_cluster or self.redis

    def up(
        self,
        progress: Callable[[str], None] = print,
        *,
        prometheus: bool = False,
        tracing: bool = False,
        edge: bool = False,
    ) -> list[ComponentStatus]:
        started = time.monotonic()
        extras = self._extras(progress, prometheus=prometheus, tracing=tracing, edge=edge)
        with self._lock():
            running_other = [b.proc.name for b in self._other_brokers if b.running()]
            if running_other:
                raise StackError(
                    f"{len(running_other)} Kafka node(s) of a {len(self._other_brokers)}-broker "
                    f"stack run from {self.settings.home}; `precast stack down` first"
                )
            self.kafka.resolve_jars(progress)
            redis_part = self._redis_part()
            if not (redis_part.running() and redis_part.healthy()):
                redis_part.start()
            for node in [*self.brokers, *extras]:
                if node.running() and node.healthy():
                    continue
                if node.running() and not (isinstance(node, KafkaNode) and node.clustered):
                    # Started but not answering yet (or wedged): give it the start timeout.
                    node.wait_ready(self.settings.start_timeout_s)
                    continue
                # A cluster node alone cannot answer before a quorum is up: start all first.
                node.start()
            try:
                redis_part.wait_ready(self.settings.start_timeout_s)
                for node in [*self.brokers, *extras]:
                    node.wait_ready(self.settings.start_timeout_s)
                self._wait_all_brokers()
            except StackError:
                for extra in extras:
                    extra.stop()
                self._stop_all(hard=False)
                raise
            if prometheus:
                self.prometheus.write_targets("stack", self._exporters(edge))
        shown = f", Prometheus {self.prometheus.url}" if prometheus else ""
        shown += f", Jaeger {self.jaeger.query_url}" if tracing else ""
        shown += f", edge {self.edge.url}" if edge else ""
        progress(
            f"stack ready in {time.monotonic() - started:.1f}s: Kafka {self.bootstrap_servers}, "
            f"Redis{' Cluster' if self.redis_cluster else ''} {self.redis_url}{shown} "
            f"(home {self.settings.home})"
        )
        return self.status()

    def _extras(
        self, progress: Callable[[str], None], *, prometheus: bool, tracing: bool, edge: bool
    ) -> list[Node]:
        """What runs beside Kafka and Redis, in start order."""
        # The exporter watches the single Redis; a Redis Cluster is not wired to it (yet).
        extras: list[Node] = []
        if prometheus:
            extras = (
                [self.prometheus] if self.redis_cluster else [self.redis_exporter, self.prometheus]
            )
        if tracing:
            ensure_jaeger(self.settings.home, progress)  # before the lock: a first build is slow
            extras.append(self.jaeger)
        if edge:
            extras += [self.edge, self.edge_exporter]
        return extras

    def _exporters(self, edge: bool) -> dict[str, list[str]]:
        """Prometheus's scrape jobs for the stack's own exporters."""
        jobs = {} if self.redis_cluster else {"redis": [self.redis_exporter.address]}
        if edge:
            jobs["edge"] = [self.edge_exporter.address]
        return jobs

    def _wait_all_brokers(self) -> None:
        """Metadata lists every broker: topics with replication factor 3 can be created."""
        if len(self.brokers) == 1:
            return
        from precast.kafka import Admin
        from precast.settings import KafkaSettings

        admin = Admin(KafkaSettings(bootstrap_servers=self.bootstrap_servers))
        deadline = time.monotonic() + self.settings.start_timeout_s
        while (seen := admin.wait_reachable(timeout=5.0)) < len(self.brokers):
            if time.monotonic() > deadline:
                raise StackError(f"only {seen} of {len(self.brokers)} Kafka brokers registered")
            time.sleep(0.5)

    def _groups(self) -> dict[str, list[Node]]:
        # Short names (`COMPONENTS`), in stop order: the scrapers first, Redis last. Both
        # layouts' nodes, so `down` stops whatever this home runs.
        return {
            "edge": [self.edge_exporter, self.edge],
            "jaeger": [self.jaeger],
            "prometheus": [self.prometheus],
            "redis-exporter": [self.redis_exporter],
            "kafka": [*self.brokers, *self._other_brokers],
            "redis": [self.redis, *self._cluster_nodes.nodes],
        }

    def running(self) -> list[str]:
        """Short names (`COMPONENTS`) of the components with a process alive now."""
        return [
            name
            for name, nodes in self._groups().items()
            if any(n.proc.pid() is not None for n in nodes)
        ]

    def _stop_all(self, hard: bool) -> list[str]:
        groups = self._groups()
        return [n.proc.name for name in ("kafka", "redis") for n in groups[name] if n.stop(hard)]

    def down(self, only: Iterable[str] | None = None) -> list[str]:
        """Stop the components named in `only` (all by default); returns what was running."""
        wanted = set(COMPONENTS if only is None else only)
        if wanted - set(COMPONENTS):
            raise ValueError(f"unknown stack components: {sorted(wanted - set(COMPONENTS))}")
        with self._lock():
            return [
                n.proc.name
                for name, nodes in self._groups().items()
                if name in wanted
                for n in nodes
                if n.stop()
            ]

    def status(self) -> list[ComponentStatus]:
        """Kafka and Redis always; Prometheus and the Redis exporter only while they run."""
        out = []
        redis_nodes = self.redis_cluster.nodes if self.redis_cluster else [self.redis]
        nodes: list[tuple[Node, str]] = [(b, b.bootstrap) for b in self.brokers]
        nodes += [(n, n.url) for n in redis_nodes]
        if self.prometheus.running():
            nodes.append((self.prometheus, self.prometheus.url))
        if self.redis_exporter.running():
            nodes.append((self.redis_exporter, self.redis_exporter.address))
        if self.jaeger.running():
            nodes.append((self.jaeger, self.jaeger.query_url))
        if self.edge.running():
            nodes.append((self.edge, self.edge.url))
        if self.edge_exporter.running():
            nodes.append((self.edge_exporter, self.edge_exporter.address))
        for node, addr in nodes:
            pid = node.proc.pid()
            state = "stopped" if pid is None else ("healthy" if node.healthy() else "unhealthy")
            out.append(ComponentStatus(node.proc.name, state, pid, addr))
        return out
