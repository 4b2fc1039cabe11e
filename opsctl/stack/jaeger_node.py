"""Jaeger (v2, an OpenTelemetry collector build) beside the local stack: `precast stack up
--tracing`. It receives OTLP over HTTP from every precast process, keeps traces in memory and
answers Jaeger's query API (`/api/traces/<id>`, `/api/services`).

Jaeger ships no Debian package; it is built from its Go module with the Go toolchain the first
time it is needed (`go build` of the version pinned in deploy/tracing/jaeger-build/go.mod, a
few minutes on two cores), into the stack's home, and reused after that. Its config is
deploy/tracing/jaeger-local.yaml, with the ports filled in from the stack settings.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from opsctl.settings import StackSettings
from opsctl.stack.process import ManagedProcess, http_ok, port_in_use, wait_healthy
from precast.errors import StackError

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "tracing"
MODULE = DEPLOY / "jaeger-build"
CONFIG = DEPLOY / "jaeger-local.yaml"
PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"


def ensure_jaeger(home: Path, progress: Callable[[str], None] = print) -> Path:
    """The jaeger binary under `home/bin`, built from its Go module when missing."""
    binary = home / "bin" / "jaeger"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise StackError(
            "jaeger is built from its Go module and no Go toolchain is on PATH "
            "(install Go 1.24 or newer, or put a jaeger binary at " + str(binary) + ")"
        )
    progress(f"building Jaeger from {PACKAGE} (first use, a few minutes) ...")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".part")
    run = subprocess.run(
        [go, "build", "-o", str(tmp), PACKAGE],
        cwd=MODULE,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
        check=False,
    )
    if run.returncode != 0:
        raise StackError(f"could not build jaeger: {run.stderr.strip()[-300:]}")
    tmp.rename(binary)
    return binary


class JaegerNode:
    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.dir = settings.home / "jaeger"
        self.proc = ManagedProcess("Jaeger", self.dir / "jaeger.pid", str(CONFIG))

    @property
    def otlp_endpoint(self) -> str:
        """Where precast processes send spans (PRECAST_TRACING__ENDPOINT)."""
        return f"http://127.0.0.1:{self.s.jaeger_otlp_port}/v1/traces"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.s.jaeger_query_port}"

    def ports(self) -> dict[str, int]:
        return {
            "PRECAST_JAEGER_OTLP_PORT": self.s.jaeger_otlp_port,
            "PRECAST_JAEGER_QUERY_PORT": self.s.jaeger_query_port,
            "PRECAST_JAEGER_QUERY_GRPC_PORT": self.s.jaeger_query_port + 1,
            "PRECAST_JAEGER_HEALTH_PORT": self.s.jaeger_health_port,
        }

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self, progress: Callable[[str], None] = print) -> None:
        if self.running():
            return
        binary = ensure_jaeger(self.s.home, progress)
        for name, port in self.ports().items():
            if port_in_use(port):
                raise StackError(
                    f"port {port} ({name.removeprefix('PRECAST_').lower()}) is in use by another "
                    "process; stop it or choose another (PRECAST_STACK__JAEGER_*_PORT)"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **{k: str(v) for k, v in self.ports().items()}}
        self.proc.start(
            [str(binary), f"--config={CONFIG}"], self.dir / "jaeger.log", self.dir, env=env
        )

    def healthy(self, timeout: float = 2.0) -> bool:
        return http_ok(f"http://127.0.0.1:{self.s.jaeger_health_port}/status", timeout)

    def wait_ready(self, timeout: float) -> None:
        wait_healthy(self.healthy, self.proc, timeout, "Jaeger", self.dir / "jaeger.log")

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=10.0, hard=hard)
