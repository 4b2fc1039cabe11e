"""With the broker or Redis unreachable, every service exits within its timeout, one line, no
traceback."""

import os
import subprocess
import sys
import time

import pytest

from opsctl.stack.process import free_port

SERVICES = [
    "producers.cli",
    "workers.precompute.cli",
    "consumer_api.cli",
    "workers.context.aggregator",
]


@pytest.mark.parametrize("module", SERVICES)
def test_service_exits_with_one_line_when_broker_unreachable(module):
    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
        "PRECAST_KAFKA__CONNECT_TIMEOUT_S": "2",
    }
    t0 = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", module], capture_output=True, text=True, env=env, timeout=60
    )
    elapsed = time.monotonic() - t0
    assert run.returncode == 3
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and f"Kafka broker unreachable at 127.0.0.1:{port}" in lines[0], (
        run.stderr
    )
    assert elapsed < 2 + 15  # its timeout plus interpreter and import time


def test_demo_exits_with_one_line_when_redis_unreachable(stack):
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": stack.bootstrap_servers,
        "PRECAST_REDIS__URL": f"redis://127.0.0.1:{free_port()}/0",
        "PRECAST_REDIS__CONNECT_TIMEOUT_S": "2",
    }
    run = subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "demo", "--no-stack"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 3
    assert (
        run.stderr.strip().count("\n") == 0
        and "Redis unreachable at redis://127.0.0.1:" in run.stderr
    )


def test_demo_exits_with_one_line_when_broker_unreachable():
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "PRECAST_KAFKA__CONNECT_TIMEOUT_S": "2",
    }
    run = subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "demo", "--no-stack"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 3
    assert run.stderr.strip().count("\n") == 0 and "Kafka broker unreachable" in run.stderr
