"""The simulator and schema CLIs as a user runs them: progress, summary, exact counts, and
one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from precast.kafka import Consumer


def run(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def test_simulator_sends_exactly_count_records_with_progress(kafka_settings, topics):
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    env = {
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": prefix,
        "PRECAST_TOPICS__PARTITIONS": "3",
        "PRECAST_SIMULATOR__PROGRESS_EVERY_S": "0.2",
    }
    out = run(
        "producers.cli",
        "--devices",
        "300",
        "--hb-interval",
        "0.05",
        "--rate",
        "3000",
        "--count",
        "3000",
        "--bad-rate",
        "0.1",
        "--speedup",
        "5000",
        "--seed",
        "2",
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert (
        "/s now" in out.stderr and "/s average" in out.stderr
    )  # progress lines with the achieved rate
    summary = out.stderr.strip().splitlines()[-1]
    assert "done, 3,000 records" in summary and "0 delivery failures" in summary
    c = Consumer(kafka_settings, "count")
    in_topics = sum(c.watermarks(t.name, p)[1] for t in topics.events() for p in range(3))
    c.close()
    assert in_topics == 3000


def test_simulator_bad_flag_is_one_line_error():
    out = run("producers.cli", "--bad-rate", "2")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "simulator.bad_rate" in out.stderr


def test_schemas_export_writes_every_contract(tmp_path):
    out = run("opsctl.cli", "schemas", "export", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert "heartbeats.v1.schema.json" in files and len(files) == 5
    hb = json.loads((tmp_path / "s" / "heartbeats.v1.schema.json").read_text())
    assert hb["x-precast-topic-role"] == "heartbeats" and "metrics" in hb["required"]
