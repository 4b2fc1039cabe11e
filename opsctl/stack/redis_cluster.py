"""A local Redis Cluster: three masters and three replicas from Debian's redis-server, joined by
`redis-cli --cluster create`, on loopback ports redis_cluster_port ... + 5."""

from __future__ import annotations

import shutil
import subprocess
import time

import redis

from opsctl.settings import StackSettings
from opsctl.stack.redis_node import RedisNode
from precast.errors import StackError

MASTERS = 3
REPLICAS_PER_MASTER = 1


class RedisClusterNodes:
    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.nodes = [RedisNode(settings, i) for i in range(MASTERS * (1 + REPLICAS_PER_MASTER))]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def running(self) -> bool:
        return any(n.running() for n in self.nodes)

    def start(self) -> None:
        if not self.running():
            # Nothing kept data (no persistence): a cold start forms a fresh cluster rather than
            # waiting for nodes.conf peers whose slots are empty anyway.
            for n in self.nodes:
                (n.dir / "nodes.conf").unlink(missing_ok=True)
        for n in self.nodes:
            n.start()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            n.wait_ready(max(1.0, deadline - time.monotonic()))
        if _info(self.nodes[0]).get("cluster_known_nodes") == "1":
            self._create()
        while not self.healthy():
            if time.monotonic() > deadline:
                raise StackError(
                    f"Redis Cluster on {self.nodes[0].address} not ready after {timeout:g}s: "
                    f"{_info(self.nodes[0]).get('cluster_state', 'no answer')}"
                )
            time.sleep(0.2)

    def _create(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise StackError("redis-cli not found on PATH (it comes with Debian's redis-tools)")
        run = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(n.address for n in self.nodes),
                "--cluster-replicas",
                str(REPLICAS_PER_MASTER),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if run.returncode != 0:
            last = (run.stdout + run.stderr).strip().splitlines()[-2:]
            raise StackError(f"redis-cli --cluster create failed: {' | '.join(last)}")

    def healthy(self, timeout: float = 2.0) -> bool:
        """Every node sees the cluster ok, and every master has a replica in sync."""
        replicas_up = 0
        for n in self.nodes:
            info = _info(n, timeout)
            if info.get("cluster_state") != "ok":
                return False
            repl = _replication(n, timeout)
            if repl.get("role") == "slave" and repl.get("master_link_status") == "up":
                replicas_up += 1
        return replicas_up == MASTERS * REPLICAS_PER_MASTER

    def masters(self) -> list[RedisNode]:
        return [n for n in self.nodes if _replication(n).get("role") == "master"]

    def stop(self, hard: bool = False) -> list[str]:
        return [n.proc.name for n in self.nodes if n.stop(hard=hard)]


def _client(node: RedisNode, timeout: float) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=node.port, socket_timeout=timeout, socket_connect_timeout=timeout
    )


def _fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep:
            out[key] = value
    return out


def _info(node: RedisNode, timeout: float = 2.0) -> dict[str, str]:
    client = _client(node, timeout)
    try:
        raw = client.execute_command("CLUSTER", "INFO")
        return _fields(raw.decode() if isinstance(raw, bytes) else str(raw))
    except redis.RedisError:
        return {}
    finally:
        client.close()


def _replication(node: RedisNode, timeout: float = 2.0) -> dict[str, str]:
    client = _client(node, timeout)
    try:
        return {k: str(v) for k, v in client.info("replication").items()}
    except redis.RedisError:
        return {}
    finally:
        client.close()
