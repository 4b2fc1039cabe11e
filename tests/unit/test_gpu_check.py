"""The GPU check fails fast and clearly without a GPU, and its measuring path works (on CPU)."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from workers import gpu_check

ROOT = Path(__file__).resolve().parents[2]


def run(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "workers.gpu_check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA GPU"
)
def test_without_a_gpu_it_fails_with_one_line_and_a_non_zero_exit():
    r = run(timeout=60)
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no usable GPU provider")
    assert "providers:" in r.stdout  # it still reports what the runtime offers


def test_a_gpu_provider_that_cannot_start_is_reported_not_hung():
    args = argparse.Namespace(model=gpu_check.DEFAULT_MODEL, sizes=[1], seconds=0.05, device_id=0)
    res = gpu_check.run_child("CUDAExecutionProvider", args, timeout=60)
    if not Path("/proc/driver/nvidia/version").exists():
        assert "error" in res and "rows" not in res


def test_measures_rows_per_second_and_prints_a_table():
    r = run("--cpu-only-ok", "--sizes", "1,256", "--seconds", "0.1")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("CPUExecutionProvider")]
    assert [ln.split()[1] for ln in rows] == ["1", "256"]
    assert all(float(ln.split()[2].replace(",", "")) > 0 for ln in rows)
