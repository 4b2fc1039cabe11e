"""`precast-drift` as its own process on a real topic: windows of an unshifted simulated fleet
stay clean, and once the simulator starts a fleet-wide drift the monitor flags features."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opsctl.stack.process import free_port

ROOT = Path(__file__).resolve().parents[2]
DRIFT_AT_S = 25  # simulated seconds; the simulator's clock runs at wall speed here


def _metrics(port: int) -> dict[tuple[str, str], float]:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
    except OSError:
        return {}
    return {
        (s.name, s.labels.get("result", s.labels.get("feature", ""))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    }


# A wall-clock scenario (~38 s: the drift starts 25 s in): with the slow scenarios. The
# monitor's windows and tests are covered without a process in tests/unit/test_drift_*.py.
@pytest.mark.slow
def test_drift_monitor_process_is_clean_then_flags_a_drift(
    kafka_settings, topics, unique, tmp_path
):
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.heartbeats.partitions),
        "PRECAST_LOG_LEVEL": "WARNING",
    }
    port = free_port()
    drift_env = {
        **env,
        "PRECAST_METRICS__PORT": str(port),
        "PRECAST_DRIFT__GROUP_ID": unique("drift"),
        "PRECAST_DRIFT__WINDOW_S": "8",
        "PRECAST_DRIFT__STEP_S": "2",
        "PRECAST_DRIFT__MIN_ROWS": "1000",
        # 400 devices: device-type shares alone wander by ~2/sqrt(400) = 0.1
        "PRECAST_DRIFT__MIN_EFFECT": "0.15",
    }
    log = (tmp_path / "drift.log").open("wb")
    mon = subprocess.Popen(
        [sys.executable, "-m", "workers.drift.cli"], env=drift_env, cwd=ROOT, stdout=log, stderr=log
    )
    sim = None
    try:
        deadline = time.monotonic() + 60
        while not _metrics(port) and time.monotonic() < deadline:
            assert mon.poll() is None, (tmp_path / "drift.log").read_text()
            time.sleep(0.2)
        time.sleep(3)  # partitions assigned, at the end of the topic
        sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "producers.cli",
                *("--devices", "400", "--hb-interval", "0.25", "--drift-share", "0.7"),
                *("--drift-at", str(DRIFT_AT_S), "--duration", str(DRIFT_AT_S + 30)),
            ],
            env={**env, "PRECAST_SIMULATOR__DRIFT_S": "5"},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started = time.monotonic()
        clean_before = flagged_at = None
        while time.monotonic() - started < DRIFT_AT_S + 30:
            m = _metrics(port)
            t = time.monotonic() - started
            if t < DRIFT_AT_S - 2 and m.get(("precast_drift_windows_total", "clean"), 0) > 0:
                clean_before = m[("precast_drift_windows_total", "clean")]
                assert m.get(("precast_drift_windows_total", "drift"), 0) == 0, m
            if t > DRIFT_AT_S and m.get(("precast_drift_flagged_features", ""), 0) > 0:
                flagged_at = t
                break
            time.sleep(1)
        assert clean_before, "no clean window was tested before the drift started"
        assert flagged_at is not None, "the drift was not flagged within 30 s"
        assert m[("precast_drift_window_rows", "error_rate")] >= 1000
        assert m[("precast_drift_ks_statistic", "error_rate")] > 0.15
    finally:
        for p in (sim, mon):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(30)
        log.close()
    assert mon.returncode == 0, (tmp_path / "drift.log").read_text()
