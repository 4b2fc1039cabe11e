"""A Redis server from Debian's package, on loopback, without persistence."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from opsctl.settings import StackSettings
from opsctl.stack.process import ManagedProcess, port_in_use, tail
from precast.errors import StackError


def ensure_redis_server(progress=print) -> str:
    """Path of redis-server; installs Debian's package when missing and we are root."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        progress("redis-server missing: installing Debian's redis-server package ...")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run = subprocess.run(
            ["apt-get", "install", "-y", "-q", "redis-server"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if run.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
            run = subprocess.run(
                ["apt-get", "install", "-y", "-q", "redis-server"],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
        found = shutil.which("redis-server")
        if found:
            return found
        raise StackError(f"could not install redis-server: {run.stderr.strip()[-200:]}")
    raise StackError(
        "redis-server not found on PATH (install it: sudo apt-get install redis-server)"
    )


class RedisNode:
    """One redis-server. `cluster_index` set: a Redis Cluster node on redis_cluster_port + index,
    in its own folder; unset: the single Redis of the default stack."""

    def __init__(self, settings: StackSettings, cluster_index: int | None = None) -> None:
        self.s = settings
        self.clustered = cluster_index is not None
        if cluster_index is None:
            self.port = settings.redis_port
            self.dir = settings.home / "redis"
            name = "Redis"
        else:
            self.port = settings.redis_cluster_port + cluster_index
            self.dir = settings.home / "redis-cluster" / str(self.port)
            name = f"Redis {self.port}"
        # redis-server rewrites its process title, so only the binary name is a stable marker.
        self.proc = ManagedProcess(name, self.dir / "redis.pid", "redis-server")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self) -> None:
        if self.running():
            return
        binary = ensure_redis_server()
        # A cluster node also listens on its bus port (port + 10000) for gossip and failover.
        ports = (self.port, self.port + 10_000) if self.clustered else (self.port,)
        for port in ports:
            if port_in_use(port):
                raise StackError(
                    f"port {port} is in use by another process; stop it or choose another "
                    "port (PRECAST_STACK__REDIS_PORT / PRECAST_STACK__REDIS_CLUSTER_PORT)"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.dir),
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]
        if self.clustered:
            argv += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                # A dead master is failed over after 2 s instead of the default 15 s.
                "--cluster-node-timeout",
                "2000",
            ]
        self.proc.start(argv, self.dir / "redis.log", self.dir)

    def healthy(self, timeout: float = 2.0) -> bool:
        import redis

        client = redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy(timeout=1.0):
            if self.proc.exited_early():
                raise StackError(
                    f"{self.proc.name} exited during start: {tail(self.dir / 'redis.log', 3)}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"{self.proc.name} not ready after {timeout:g}s: "
                    f"{tail(self.dir / 'redis.log', 3)}"
                )
            time.sleep(0.1)

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=10.0, hard=hard)
