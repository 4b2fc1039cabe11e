"""The secured stack's bootstrap never puts a password on a command line (`ps` shows every
argument of every process to every local user): the storage format reads `--add-scram` from a
0600 Java argument file, the broker reads its JAAS line from its 0600 properties, and the
argument file is gone once the broker runs (issue 36, deliverable 7)."""

from __future__ import annotations

import json
import subprocess

import pytest

from opsctl.settings import StackSettings
from opsctl.stack import kafka_node
from opsctl.stack.secure import SecureStack
from precast.settings import TopicSettings


@pytest.fixture
def stack(tmp_path, monkeypatch):
    runs: list[list[str]] = []

    def fake_run(argv, **_kw):
        runs.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(kafka_node.subprocess, "run", fake_run)
    monkeypatch.setattr(kafka_node, "java_major", lambda: 17)
    monkeypatch.setattr(kafka_node, "port_in_use", lambda _p: False)
    s = SecureStack(StackSettings(home=tmp_path / "home", jar_cache=tmp_path / "jars"))
    monkeypatch.setattr(s.kafka, "resolve_jars", lambda *a, **k: tmp_path / "jars")
    monkeypatch.setattr(s.kafka.proc, "start", lambda argv, *a, **k: runs.append(list(argv)))
    s.security.prepare()
    return s, runs


def passwords(s: SecureStack) -> list[str]:
    return list(json.loads(s.security.credentials_path.read_text()).values())


def test_no_password_in_the_argv_of_the_format_or_the_broker(stack):
    s, runs = stack
    s.kafka.start()
    assert len(runs) == 2  # kafka.tools.StorageTool format, then kafka.Kafka
    fmt, broker = runs
    assert "kafka.tools.StorageTool" in fmt and "kafka.Kafka" in broker
    secrets = passwords(s)
    assert len(secrets) >= 2
    for argv in runs:
        joined = " ".join(argv)
        for pw in secrets:
            assert pw not in joined
        assert "password=" not in joined.lower()
    # The super users still reach the storage tool: through `@file`, which java expands.
    arg_files = [a for a in fmt if a.startswith("@")]
    assert arg_files == [f"@{s.security.format_args_path}"]
    path = s.security.format_args_path
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    body = path.read_text().split()
    for user in ("broker", "admin"):
        assert f"SCRAM-SHA-512=[name={user},password={s.security.password(user)}]" in body
    assert body.count("--add-scram") == 2


def test_the_argument_file_is_removed_once_the_broker_started(stack, monkeypatch):
    s, _runs = stack
    monkeypatch.setattr(s.kafka, "wait_ready", lambda _t: None)
    monkeypatch.setattr(s, "provision", lambda _t: 0)
    monkeypatch.setattr(s, "status", lambda: [])
    monkeypatch.setattr(s.kafka, "running", lambda: False)
    s.up(progress=lambda _m: None, topics=TopicSettings())
    assert not s.security.format_args_path.exists()
    assert s.security.credentials_path.exists()
    assert oct(s.security.credentials_path.stat().st_mode & 0o777) == "0o600"
