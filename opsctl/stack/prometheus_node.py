"""Prometheus from Debian's package, on loopback, scraping what the demo (or a test) runs.

Targets come from file-based service discovery: whoever starts services writes one JSON file
of `{job: [host:port, ...]}` under `<home>/prometheus/targets/` (`write_targets`), and
Prometheus picks it up within seconds without a restart. Every rule file under
`deploy/alerts/` is loaded, so the alerts SREs get are the ones the tests check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from opsctl.settings import StackSettings
from opsctl.stack.process import ManagedProcess, http_ok, port_in_use, tail, wait_healthy
from precast.errors import StackError

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "alerts"


def ensure_prometheus(progress=print) -> str:
    """Path of the prometheus binary; installs Debian's package when missing and we are root."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        progress("prometheus missing: installing Debian's prometheus package ...")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
        run = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if run.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
            run = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        found = shutil.which("prometheus")
        if found:
            return found
        raise StackError(f"could not install prometheus: {run.stderr.strip()[-200:]}")
    raise StackError("prometheus not found on PATH (install it: sudo apt-get install prometheus)")


def prometheus_config(
    targets_dir: Path, rules_dir: Path, scrape_interval_s: float
) -> dict[str, object]:
    interval = f"{max(1, round(scrape_interval_s))}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules_dir / "*.rules.yml")],
        "scrape_configs": [
            {
                # The job label comes from each target group (see write_targets).
                "job_name": "precast",
                "file_sd_configs": [
                    {"files": [str(targets_dir / "*.json")], "refresh_interval": "2s"}
                ],
            }
        ],
    }


class PrometheusNode:
    def __init__(self, settings: StackSettings, rules_dir: Path = RULES_DIR) -> None:
        self.s = settings
        self.dir = settings.home / "prometheus"
        self.targets_dir = self.dir / "targets"
        self.rules_dir = rules_dir
        self.proc = ManagedProcess(
            "Prometheus", self.dir / "prometheus.pid", f"{self.dir}/prometheus.yml"
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.s.prometheus_port}"

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self) -> None:
        if self.running():
            return
        binary = ensure_prometheus()
        if port_in_use(self.s.prometheus_port):
            raise StackError(
                f"port {self.s.prometheus_port} is in use by another process; stop it or "
                "choose another port (PRECAST_STACK__PROMETHEUS_PORT)"
            )
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "prometheus.yml"
        cfg = prometheus_config(self.targets_dir, self.rules_dir, self.s.scrape_interval_s)
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        argv = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            # A development stack: a day of history is plenty and keeps the disk small.
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{self.s.prometheus_port}",
            "--web.enable-lifecycle",
            # Trace-ID exemplars on the latency histograms: a slow bucket links to its trace.
            "--enable-feature=exemplar-storage",
            "--log.level=warn",
        ]
        self.proc.start(argv, self.dir / "prometheus.log", self.dir)

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=timeout) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy(timeout=1.0):
            if self.proc.exited_early():
                raise StackError(
                    f"Prometheus exited during start: {tail(self.dir / 'prometheus.log', 3)}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"Prometheus not ready after {timeout:g}s: "
                    f"{tail(self.dir / 'prometheus.log', 3)}"
                )
            time.sleep(0.2)

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=15.0, hard=hard)

    # -- targets --------------------------------------------------------------------------------
    def write_targets(self, name: str, jobs: dict[str, list[str]]) -> Path:
        """Publish `{job: [host:port, ...]}` as `<name>.json`; written to a temporary file and
        renamed, so Prometheus never reads half a file."""
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        groups = [{"targets": addrs, "labels": {"job": job}} for job, addrs in jobs.items()]
        path = self.targets_dir / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups, indent=2) + "\n")
        tmp.rename(path)
        return path

    def remove_targets(self, name: str) -> None:
        (self.targets_dir / f"{name}.json").unlink(missing_ok=True)


class RedisExporterNode:
    """Debian's prometheus-redis-exporter beside the stack's Redis: Redis's own saturation
    (memory, clients, commands) for the dashboards, started with Prometheus."""

    BINARY = "prometheus-redis-exporter"

    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.dir = settings.home / "redis-exporter"
        self.proc = ManagedProcess(
            "Redis exporter", self.dir / "exporter.pid", f"127.0.0.1:{settings.redis_exporter_port}"
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.s.redis_exporter_port}"

    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self) -> None:
        if self.running():
            return
        binary = shutil.which(self.BINARY)
        if binary is None:
            raise StackError(
                f"{self.BINARY} not found on PATH (install it: sudo apt-get install {self.BINARY})"
            )
        if port_in_use(self.s.redis_exporter_port):
            raise StackError(
                f"port {self.s.redis_exporter_port} is in use by another process; stop it or "
                "choose another port (PRECAST_STACK__REDIS_EXPORTER_PORT)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "-redis.addr",
            f"redis://127.0.0.1:{self.s.redis_port}",
            "-web.listen-address",
            self.address,
        ]
        self.proc.start(argv, self.dir / "exporter.log", self.dir)

    def healthy(self, timeout: float = 2.0) -> bool:
        return http_ok(f"http://{self.address}/metrics", timeout)

    def wait_ready(self, timeout: float) -> None:
        wait_healthy(self.healthy, self.proc, timeout, "Redis exporter", self.dir / "exporter.log")

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=10.0, hard=hard)
