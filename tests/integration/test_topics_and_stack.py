import os
import socket
import subprocess
import sys

import pytest

from opsctl.settings import StackSettings
from opsctl.stack import LocalStack
from opsctl.stack.process import free_port
from precast.errors import StackError, TopicContractError
from schemas.topics import catalog


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opsctl.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def test_ensure_is_idempotent_and_refuses_wrong_partitions(admin, stack, unique):
    prefix = unique("ens") + "."
    env = {
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": stack.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": prefix,
        "PRECAST_TOPICS__PARTITIONS": "3",
    }
    try:
        first = cli("topics", "ensure", env=env)
        assert first.returncode == 0, first.stderr
        n = len(list(catalog(prefix, 3)))  # the whole catalog
        assert f"{n} created" in first.stdout

        def ours() -> dict[str, int]:  # other tests create topics on the shared broker meanwhile
            return {n: p for n, p in admin.topic_partitions().items() if n.startswith(prefix)}

        before = ours()
        assert len(before) == n
        second = cli("topics", "ensure", env=env)
        assert second.returncode == 0
        assert f"0 created, {n} already matched" in second.stdout
        assert ours() == before

        wrong = cli("topics", "ensure", env={**env, "PRECAST_TOPICS__PARTITIONS": "4"})
        assert wrong.returncode == TopicContractError.exit_code
        assert (
            wrong.stderr.count("\n") == 1
            and "has 3 partitions but its contract says 4" in wrong.stderr
        )
        assert "Traceback" not in wrong.stderr
    finally:
        admin.delete_topics([t.name for t in catalog(prefix, 3)])


def test_ensure_reports_config_drift(admin, unique):
    cat = catalog(unique("drift") + ".", 2)
    admin.create_topic(cat.predictions.name, 2, {"cleanup.policy": "delete"})
    try:
        reports = admin.ensure_topics(list(cat))
        drift = [r for r in reports if r.action == "drift"]
        assert [r.name for r in drift] == [cat.predictions.name]
        assert "cleanup.policy" in drift[0].detail
    finally:
        admin.delete_topics([t.name for t in cat])


def test_stack_up_is_idempotent_and_status_healthy(stack):
    pids = {s.name: s.pid for s in stack.status()}
    stack.up(progress=lambda m: None)
    after = stack.status()
    assert {s.name: s.pid for s in after} == pids
    assert all(s.state == "healthy" for s in after)
    out = cli("stack", "status", env={"PRECAST_STACK__HOME": str(stack.settings.home)})
    assert out.returncode == 0 and out.stdout.count("healthy") == len(after)


def test_port_in_use_is_one_clear_error(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        busy = blocker.getsockname()[1]
        s = LocalStack(
            StackSettings(
                home=tmp_path, kafka_port=free_port(), controller_port=free_port(), redis_port=busy
            )
        )
        with pytest.raises(StackError, match=f"port {busy} is in use"):
            s.up(progress=lambda m: None)
        assert all(c.state == "stopped" for c in s.status())


def test_private_stack_starts_stops_and_down_leaves_others_alone(tmp_path, stack):
    s = LocalStack(
        StackSettings(
            home=tmp_path,
            kafka_port=free_port(),
            controller_port=free_port(),
            redis_port=free_port(),
        )
    )
    try:
        s.up(progress=lambda m: None)
        assert all(c.state == "healthy" for c in s.status())
    finally:
        stopped = s.down()
    assert sorted(stopped) == ["Kafka broker", "Redis"]
    assert all(c.state == "stopped" for c in s.status())
    assert all(c.state == "healthy" for c in stack.status())  # the shared stack is untouched


def test_wait_fully_replicated_counts_in_sync_replicas(admin, unique):
    # The fault suite and the cluster benchmark wait on this between faults; on the one-broker
    # stack a topic is fully replicated at 1 and never at 3.
    topic = unique("isr")
    admin.create_topic(topic, 2, {})
    try:
        assert 0 <= admin.wait_fully_replicated([topic], 1, timeout=30) < 30
        with pytest.raises(TimeoutError, match="not at 3 in-sync replicas"):
            admin.wait_fully_replicated([topic], 3, timeout=1)
        with pytest.raises(TimeoutError):  # a topic that does not exist never is
            admin.wait_fully_replicated([unique("absent")], 1, timeout=1)
    finally:
        admin.delete_topics([topic])
