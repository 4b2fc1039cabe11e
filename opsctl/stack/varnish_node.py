"""The edge cache beside the local stack: `precast stack up --edge` starts Varnish (Debian's
`varnish`, with `varnish-modules` for xkey) in front of the API replicas, with the VCL the
project ships (deploy/edge/precast.vcl) and a `backends.vcl` written here from the stack
settings (the replicas, the director, who may purge), and Debian's Prometheus exporter for it.

Varnish runs unprivileged-style from the stack's home (`-j none`, its working directory under
`<home>/edge`), in the foreground of its own session, so the stack stops it like the rest.
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

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "edge"
VCL = DEPLOY / "precast.vcl"
_VMOD_DIRS = ("/usr/lib/x86_64-linux-gnu/varnish/vmods", "/usr/lib/aarch64-linux-gnu/varnish/vmods")


def backends_vcl(backends: list[str], purgers: list[str]) -> str:
    """backends.vcl: each replica with a readiness probe (a replica still loading gets no
    requests), a round-robin director named `origin`, and the `purgers` ACL."""
    lines = [
        "# Written by `precast stack up --edge` from PRECAST_STACK__EDGE_BACKENDS; do not edit.",
        "import directors;",
        "",
        "probe api_ready {",
        '    .url = "/readyz";',
        "    .interval = 1s;",
        "    .timeout = 500ms;",
        "    .window = 3;",
        "    .threshold = 2;",
        "    .initial = 2;",
        "}",
    ]
    for i, b in enumerate(backends):
        host, _, port = b.rpartition(":")
        lines += [
            f"backend api{i} {{",
            f'    .host = "{host.strip("[]")}";',
            f'    .port = "{port}";',
            "    .probe = api_ready;",
            "    .connect_timeout = 1s;",
            "    .first_byte_timeout = 5s;",
            "    .between_bytes_timeout = 5s;",
            "}",
        ]
    lines += ["", "acl purgers {", *(f'    "{p}";' for p in purgers), "}", ""]
    lines += ["sub vcl_init {", "    new origin = directors.round_robin();"]
    lines += [f"    origin.add_backend(api{i});" for i in range(len(backends))]
    lines += ["}", ""]
    return "\n".join(lines)


def vmod_dir() -> str | None:
    return next((d for d in _VMOD_DIRS if Path(d, "libvmod_xkey.so").exists()), None)


class VarnishNode:
    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.dir = settings.home / "edge"
        self.workdir = self.dir / "varnish"
        self.proc = ManagedProcess("Varnish (edge)", self.dir / "varnishd.pid", str(self.workdir))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.s.edge_port}"

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self, progress: Callable[[str], None] = print) -> None:
        if self.running():
            return
        varnishd = shutil.which("varnishd") or (
            "/usr/sbin/varnishd" if Path("/usr/sbin/varnishd").exists() else None
        )
        if varnishd is None or vmod_dir() is None:
            raise StackError(
                "the edge needs Varnish with xkey: install Debian's varnish and varnish-modules "
                "(./dev setup does)"
            )
        for port in (self.s.edge_port, self.s.edge_admin_port):
            if port_in_use(port):
                raise StackError(
                    f"port {port} (the edge) is in use by another process; stop it or choose "
                    "another (PRECAST_STACK__EDGE_PORT, PRECAST_STACK__EDGE_ADMIN_PORT)"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "backends.vcl").write_text(
            backends_vcl(self.s.edge_backends, ["127.0.0.1", "::1"])
        )
        # Checked before it starts: a VCL error is one line here, not a manager that exits.
        argv = [
            varnishd,
            "-j",
            "none",
            "-n",
            str(self.workdir),
            "-p",
            f"vcl_path={self.dir}:{DEPLOY}",
            "-p",
            f"vmod_path={vmod_dir()}",
            "-f",
            str(VCL),
        ]
        check = subprocess.run([*argv, "-C"], capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise StackError(f"the edge's VCL does not compile: {check.stderr.strip()[-300:]}")
        self.proc.start(
            [
                *argv,
                "-F",
                "-a",
                f"127.0.0.1:{self.s.edge_port}",
                "-T",
                f"127.0.0.1:{self.s.edge_admin_port}",
                "-s",
                self.s.edge_storage,
            ],
            self.dir / "varnishd.log",
            self.dir,
            env=dict(os.environ),
        )

    def healthy(self, timeout: float = 2.0) -> bool:
        return http_ok(f"{self.url}/edge/healthz", timeout)

    def wait_ready(self, timeout: float) -> None:
        wait_healthy(self.healthy, self.proc, timeout, "Varnish (edge)", self.dir / "varnishd.log")

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=10.0, hard=hard)


class VarnishExporterNode:
    """Debian's prometheus-varnish-exporter, reading the edge's shared memory (varnishstat)."""

    def __init__(self, settings: StackSettings, edge: VarnishNode) -> None:
        self.s, self.edge = settings, edge
        self.proc = ManagedProcess(
            "Varnish exporter",
            edge.dir / "exporter.pid",
            f"127.0.0.1:{settings.edge_exporter_port}",
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.s.edge_exporter_port}"

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self, progress: Callable[[str], None] = print) -> None:
        if self.running():
            return
        exporter = shutil.which("prometheus-varnish-exporter")
        if exporter is None:
            raise StackError(
                "the edge's metrics need Debian's prometheus-varnish-exporter (./dev setup)"
            )
        if port_in_use(self.s.edge_exporter_port):
            raise StackError(
                f"port {self.s.edge_exporter_port} is in use by another process; stop it or "
                "choose another (PRECAST_STACK__EDGE_EXPORTER_PORT)"
            )
        self.proc.start(
            [
                exporter,
                "-n",
                str(self.edge.workdir),
                "-web.listen-address",
                self.address,
            ],
            self.edge.dir / "exporter.log",
            self.edge.dir,
        )

    def healthy(self, timeout: float = 2.0) -> bool:
        return http_ok(f"http://{self.address}/metrics", timeout)

    def wait_ready(self, timeout: float) -> None:
        wait_healthy(
            self.healthy, self.proc, timeout, "Varnish exporter", self.edge.dir / "exporter.log"
        )

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=10.0, hard=hard)
