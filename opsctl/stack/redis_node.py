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
    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.dir = settings.home / "redis"
        # redis-server rewrites its process title, so only the binary name is a stable marker.
        self.proc = ManagedProcess("Redis", self.dir / "redis.pid", "redis-server")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.s.redis_port}/0"

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self) -> None:
        if self.running():
            return
        binary = ensure_redis_server()
        if port_in_use(self.s.redis_port):
            raise StackError(
                f"port {self.s.redis_port} is in use by another process; stop it or "
                "choose another port (PRECAST_STACK__REDIS_PORT)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.s.redis_port),
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
        self.proc.start(argv, self.dir / "redis.log", self.dir)

    def healthy(self, timeout: float = 2.0) -> bool:
        import redis

        client = redis.Redis.from_url(
            self.url, socket_timeout=timeout, socket_connect_timeout=timeout
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
                raise StackError(f"Redis exited during start: {tail(self.dir / 'redis.log', 3)}")
            if time.monotonic() > deadline:
                raise StackError(
                    f"Redis not ready after {timeout:g}s: {tail(self.dir / 'redis.log', 3)}"
                )
            time.sleep(0.1)

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=10.0, hard=hard)
