"""`./dev test` and `./dev demo` leave nothing running that they started, whatever the order.

Each test gets a scratch stack home and free ports, so the shared stack the other tests use is
never touched; leftovers are looked for in /proc, not only in the launcher's pid files.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from opsctl.stack.process import free_port
from tests.conftest import ROOT

# A unit test that needs nothing: what ./dev runs inside while the stack is up.
CHEAP = ["tests/unit/test_kafka_retry.py", "-k", "test_zero_patience_tries_once", "-q"]
TOOLS = ("python", "pytest", "precast", "ruff", "mypy", "pip")


@dataclass(frozen=True)
class Scratch:
    home: Path
    redis_port: int
    env: dict[str, str]

    def processes(self) -> list[str]:
        """Command lines of live processes of this scratch stack (Kafka and Prometheus name its
        home; Redis and the Redis exporter its Redis port)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            cmd = raw.replace(b"\0", b" ").decode(errors="replace")
            if state == "Z":
                continue
            mine = (str(self.home), f"127.0.0.1:{self.redis_port}")
            if any(m in cmd for m in mine):
                found.append(f"{pid}: {cmd[:160]}")
        return found

    def precast(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "opsctl.cli", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=150,
        )

    def dev(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "dev"), *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _venv_standin(tmp: Path) -> Path:
    """A virtualenv for ./dev that is this one (its tools linked, its install stamp current),
    so ./dev installs nothing while under test."""
    real = Path(sys.executable).parent
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool in TOOLS:
        if (real / tool).exists():
            (venv / "bin" / tool).symlink_to(real / tool)
    digest = subprocess.run(
        ["sha256sum", str(ROOT / "pyproject.toml")], capture_output=True, text=True, check=True
    ).stdout[:16]
    (venv / ".precast-installed").write_text(digest + "\n")
    return venv


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Scratch]:
    for tool in ("java", "redis-server", "prometheus", "prometheus-redis-exporter"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    home = tmp_path / "stack"
    redis_port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PRECAST_DEV_VENV": str(_venv_standin(tmp_path)),
        "PRECAST_STACK__HOME": str(home),
        "PRECAST_STACK__KAFKA_PORT": str(free_port()),
        "PRECAST_STACK__CONTROLLER_PORT": str(free_port()),
        "PRECAST_STACK__REDIS_PORT": str(redis_port),
        "PRECAST_STACK__PROMETHEUS_PORT": str(free_port()),
        "PRECAST_STACK__REDIS_EXPORTER_PORT": str(free_port()),
        "PRECAST_STACK__KAFKA_HEAP": "256m",
        "PRECAST_CONTEXT__DATA_DIR": str(tmp_path / "context"),  # the demo's, off the checkout
    }
    s = Scratch(home, redis_port, env)
    yield s
    s.precast("stack", "down")  # whatever a failing test left behind


@pytest.mark.timeout(400)
def test_dev_test_stops_the_stack_it_started(scratch: Scratch) -> None:
    assert scratch.processes() == []
    run = scratch.dev("test", *CHEAP)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    stopped = run.stderr.split("stopping the local stack this run started: ", 1)[1].split()[:4]
    assert sorted(stopped) == ["kafka", "prometheus", "redis", "redis-exporter"], run.stderr
    assert scratch.processes() == []
    assert scratch.precast("stack", "running").stdout == ""


# slow: a fault scenario of ~16 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_dev_test_leaves_a_stack_that_was_already_up(scratch: Scratch) -> None:
    up = scratch.precast("stack", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    before = scratch.processes()
    assert len(before) == 4, before  # Kafka, Redis, Prometheus, the Redis exporter
    run = scratch.dev("test", *CHEAP)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stopping the local stack" not in run.stderr
    assert scratch.processes() == before
    down = scratch.precast("stack", "down")
    assert down.returncode == 0
    assert scratch.processes() == []


# slow: a fault scenario of ~20 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_dev_test_stops_only_the_component_it_started(scratch: Scratch) -> None:
    # Redis was up before (another tool started it); ./dev starts the rest and stops only that.
    up = scratch.precast("stack", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    down = scratch.precast("stack", "down", "kafka", "prometheus", "redis-exporter")
    assert down.returncode == 0, down.stdout + down.stderr
    assert scratch.precast("stack", "running").stdout.split() == ["redis"]
    run = scratch.dev("test", *CHEAP)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stopping the local stack this run started: prometheus redis-exporter kafka" in (
        run.stderr
    )
    assert scratch.precast("stack", "running").stdout.split() == ["redis"]
    assert [p for p in scratch.processes() if "redis-server" not in p] == []


# slow: a fault scenario of ~10 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_terminated_dev_run_still_stops_what_it_started(scratch: Scratch) -> None:
    proc = subprocess.Popen(
        [str(ROOT / "dev"), "test", *CHEAP],
        env=scratch.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not scratch.processes():
        time.sleep(0.2)
    assert scratch.processes(), "the stack never started"
    proc.send_signal(signal.SIGTERM)  # to ./dev alone, as a CI timeout would
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 143, out
    assert scratch.processes() == [], out


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_dev_demo_then_dev_test_leave_nothing_running(scratch: Scratch) -> None:
    api_port = str(free_port())
    demo = scratch.dev(
        "demo", "--devices", "50", "--rate", "50", "--duration", "3", "--port", api_port
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    # the board's URL before anything else (the installs, the stack), on the demo's port
    first = demo.stderr.splitlines()[0].replace("\033[1m", "").replace("\033[0m", "")
    assert first.startswith(f"[dev] board: http://127.0.0.1:{api_port}/board/"), demo.stderr
    assert demo.stdout.splitlines()[0].startswith(f"board: http://127.0.0.1:{api_port}/board/")
    assert scratch.processes() == [], demo.stdout + demo.stderr
    run = scratch.dev("test", *CHEAP)
    assert run.returncode == 0, run.stdout + run.stderr
    assert scratch.processes() == []
