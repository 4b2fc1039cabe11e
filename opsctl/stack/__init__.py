"""The local development stack: one Kafka 4 (KRaft) broker and one Redis, on loopback, plus
Prometheus when asked (`up(prometheus=True)`: `precast stack up` and the demo do, tests that
need it start a private one).

`LocalStack.up()` is idempotent: a healthy stack started earlier from the same home folder is
reused. `down()` stops only processes whose pid files it wrote. Tests, the demo and CI all use
this same launcher.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from opsctl.settings import StackSettings
from opsctl.stack.kafka_node import KafkaNode
from opsctl.stack.prometheus_node import PrometheusNode, RedisExporterNode
from opsctl.stack.redis_node import RedisNode
from precast.errors import StackError

# What `down(only=...)` and `running()` name: one entry per process the stack starts.
COMPONENTS = ("prometheus", "redis-exporter", "kafka", "redis")


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    state: str  # "healthy" | "unhealthy" | "stopped"
    pid: int | None
    address: str


class LocalStack:
    def __init__(self, settings: StackSettings | None = None) -> None:
        s = settings or StackSettings()
        self.settings = s.model_copy(
            update={
                "home": Path(s.home).expanduser().resolve(),
                "jar_cache": Path(s.jar_cache).expanduser().resolve(),
            }
        )
        self.kafka = KafkaNode(self.settings)
        self.redis = RedisNode(self.settings)
        self.prometheus = PrometheusNode(self.settings)
        self.redis_exporter = RedisExporterNode(self.settings)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap

    @property
    def redis_url(self) -> str:
        return self.redis.url

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

    def up(
        self, progress: Callable[[str], None] = print, *, prometheus: bool = False
    ) -> list[ComponentStatus]:
        started = time.monotonic()
        nodes: list[KafkaNode | RedisNode | PrometheusNode | RedisExporterNode] = [
            self.redis,
            self.kafka,
        ]
        if prometheus:
            nodes += [self.redis_exporter, self.prometheus]
        with self._lock():
            self.kafka.resolve_jars(progress)
            for node in nodes:
                if node.running() and node.healthy():
                    continue
                if node.running():
                    # Started but not answering yet (or wedged): give it the start timeout.
                    node.wait_ready(self.settings.start_timeout_s)
                    continue
                node.start()
            try:
                for node in nodes:
                    node.wait_ready(self.settings.start_timeout_s)
            except StackError:
                for node in nodes:
                    node.stop()
                raise
            if prometheus:
                self.prometheus.write_targets("stack", {"redis": [self.redis_exporter.address]})
        extra = f", Prometheus {self.prometheus.url}" if prometheus else ""
        progress(
            f"stack ready in {time.monotonic() - started:.1f}s: Kafka {self.bootstrap_servers}, "
            f"Redis {self.redis_url}{extra} (home {self.settings.home})"
        )
        return self.status()

    def _nodes(self) -> dict[str, KafkaNode | RedisNode | PrometheusNode | RedisExporterNode]:
        # Short names (`COMPONENTS`), in stop order: the scrapers first, Redis last.
        return {
            "prometheus": self.prometheus,
            "redis-exporter": self.redis_exporter,
            "kafka": self.kafka,
            "redis": self.redis,
        }

    def running(self) -> list[str]:
        """Short names (`COMPONENTS`) of the components whose process is alive now."""
        return [name for name, node in self._nodes().items() if node.proc.pid() is not None]

    def down(self, only: Iterable[str] | None = None) -> list[str]:
        """Stop the components named in `only` (all by default); returns what was running."""
        wanted = set(COMPONENTS if only is None else only)
        if wanted - set(COMPONENTS):
            raise ValueError(f"unknown stack components: {sorted(wanted - set(COMPONENTS))}")
        stopped = []
        with self._lock():
            for name, node in self._nodes().items():
                if name in wanted and node.stop():
                    stopped.append(node.proc.name)
        return stopped

    def status(self) -> list[ComponentStatus]:
        """Kafka and Redis always; Prometheus and the Redis exporter only while they run."""
        out = []
        nodes: list[tuple[KafkaNode | RedisNode | PrometheusNode | RedisExporterNode, str]] = [
            (self.kafka, self.bootstrap_servers),
            (self.redis, self.redis_url),
        ]
        if self.prometheus.running():
            nodes.append((self.prometheus, self.prometheus.url))
        if self.redis_exporter.running():
            nodes.append((self.redis_exporter, self.redis_exporter.address))
        for node, addr in nodes:
            pid = node.proc.pid()
            state = "stopped" if pid is None else ("healthy" if node.healthy() else "unhealthy")
            out.append(ComponentStatus(node.proc.name, state, pid, addr))
        return out
