"""`precast dataset build` on the real broker: the Parquet parts hold exactly the rows the
builder computes from the same records, the manifest counts and binds them, a build killed
midway resumes to the same dataset, and bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from opsctl.toolkit.ranges import format_time
from precast.fleet import load_fleet
from precast.kafka import Producer
from tests.integration.ops_support import cli_env, precast, spawn
from tests.outcome_support import Simulated, build, features, simulate

FLEETS = {"devices": None, "trailers": "schemas/fleets/trailers.toml"}


def _publish(kafka, s: Simulated) -> None:
    p = Producer(kafka)
    for r in s.records:
        p.copy(r.topic(), r.partition(), r.key(), r.value(), None, r.timestamp()[1])
    p.flush()


def _env(kafka, topics, tmp_path: Path, spec: str | None = None) -> dict[str, str]:
    extra = {
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.heartbeats.partitions),
    }
    if spec:
        extra["PRECAST_FLEET__SPEC"] = spec
    return cli_env(kafka, tmp_path / "state", **extra)


def _range(s: Simulated) -> list[str]:
    first = min(r.timestamp()[1] for r in s.records)
    return ["--from", format_time(first), "--to", format_time(s.last_ms + 1)]


def read_dataset(folder: Path) -> dict:
    tables = [pq.read_table(p) for p in sorted(folder.glob("part-*.parquet"))]
    cols: dict = {}
    for t in tables:
        for name in t.column_names:
            cols.setdefault(name, []).extend(t.column(name).to_pylist())
    order = sorted(range(len(cols["entity_id"])), key=lambda i: cols["entity_id"][i])
    return {k: [v[i] for i in order] for k, v in cols.items()}


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_build_writes_the_rows_the_builder_computes_and_a_manifest(
    name, kafka_settings, topics, tmp_path
):
    fleet = load_fleet(FLEETS[name])
    now = int(time.time() * 1000)
    s = simulate(fleet, devices=120, rounds=30, seed=2, topics=topics, t0=now - 600_000)
    _publish(kafka_settings, s)
    out = tmp_path / "ds"
    env = _env(kafka_settings, topics, tmp_path, FLEETS[name])
    args = ["dataset", "build", *_range(s), "--out", str(out), "--no-progress"]
    r = precast(env, *args, "--context-lookback", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "rows by label" in r.stdout and "wrote" in r.stdout
    got = read_dataset(out)
    mine = build(s).rows()  # every partition at once: devices never share one
    order = sorted(range(len(mine["entity_id"])), key=lambda i: mine["entity_id"][i])
    mine = {k: [v[i] for i in order] for k, v in mine.items()}
    assert len(got["entity_id"]) == len(mine["entity_id"]) > 20
    for col in ("device_id", "entity_id", "time_ms", "heartbeat_time_ms", "label", "resolved_by"):
        assert got[col] == list(mine[col]), col
    assert np.array_equal(features(got, fleet), features(mine, fleet))
    m = json.loads((out / "manifest.json").read_text())
    assert m["fleet"]["feature_hash"] == fleet.features.hash
    assert m["features"] == list(fleet.features.names) and m["labels"] == list(fleet.spec.labels)
    assert m["counts"]["rows"] == len(got["label"])
    assert sum(m["counts"]["by_label"].values()) == m["counts"]["labelled_work_orders"]
    assert m["dropped"].get("closed_without_resolution", 0) > 0  # 10 % of closes carry none
    assert m["range"]["from_ms"] < m["range"]["to_ms"] <= m["range"]["resolved_until_ms"]
    # the same command again does nothing; `show` prints the manifest
    again = precast(env, *args, "--context-lookback", "1")
    assert again.returncode == 0 and "nothing to do" in again.stdout
    shown = precast(env, "dataset", "show", str(out))
    assert shown.returncode == 0 and json.loads(shown.stdout)["counts"] == m["counts"]


# A kill-and-resume scenario (~30 s), with the slow fault scenarios (`./dev test -m slow`); the
# default suite keeps the build itself and its rerun ("nothing to do", above).
@pytest.mark.slow
def test_a_killed_build_resumes_to_the_same_dataset(kafka_settings, admin, unique, tmp_path):
    from schemas.topics import catalog

    cat = catalog(prefix=unique("test") + ".", partitions=6)
    admin.ensure_topics(list(cat))
    try:
        fleet = load_fleet()
        now = int(time.time() * 1000)
        s = simulate(fleet, devices=600, rounds=40, seed=4, topics=cat, t0=now - 900_000)
        _publish(kafka_settings, s)
        env = _env(kafka_settings, cat, tmp_path)
        out, ref = tmp_path / "ds", tmp_path / "ref"
        args = [
            "dataset",
            "build",
            *_range(s),
            "--no-progress",
            "--resolved-until",
            format_time(now + 60_000),
        ]
        proc = spawn(env, *args, "--out", str(out))
        cp, killed_after = out / "_checkpoint.json", None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done = json.loads(cp.read_text())["done"]
            except (OSError, ValueError, KeyError):
                done = {}
            if done:
                os.kill(proc.pid, signal.SIGKILL)
                killed_after = dict(done)
                break
            time.sleep(0.02)
        proc.communicate(timeout=30)  # reaps it and closes its pipes
        assert killed_after is not None and proc.returncode == -signal.SIGKILL, "not killed midway"
        assert not (out / "manifest.json").exists() and len(killed_after) < 6
        kept = {
            p: (out / f"part-{int(p):05d}.parquet").stat().st_mtime_ns
            for p in killed_after
            if killed_after[p]["rows"]
        }
        resumed = precast(env, *args, "--out", str(out), timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        assert "resuming" in resumed.stdout
        for p, mtime in kept.items():  # a finished partition is not built again
            assert (out / f"part-{int(p):05d}.parquet").stat().st_mtime_ns == mtime
        fresh = precast(env, *args, "--out", str(ref), timeout=180)
        assert fresh.returncode == 0, fresh.stderr
        a, b = read_dataset(out), read_dataset(ref)
        assert len(a["entity_id"]) > 50 and a == b
        ma = json.loads((out / "manifest.json").read_text())
        mb = json.loads((ref / "manifest.json").read_text())
        assert (
            ma["resumes"] == 1 and ma["counts"] == mb["counts"] and ma["dropped"] == mb["dropped"]
        )
    finally:
        admin.delete_topics([t.name for t in cat])


def test_bad_input_is_one_line_and_exit_2(kafka_settings, topics, tmp_path):
    env = _env(kafka_settings, topics, tmp_path)
    out = tmp_path / "ds"
    no_outcomes = tmp_path / "no-outcomes.toml"
    text = Path("schemas/fleets/devices.toml").read_text()
    cut = text.index("\n[outcomes]\n")
    no_outcomes.write_text(text[:cut] + text[text.index("# -- the simulator", cut) :])
    broken = tmp_path / "broken.toml"
    broken.write_text(text.replace('default_label = "monitor_only"', 'default_label = "panic"'))
    (tmp_path / "a-file").write_text("x")
    cases = [
        (
            ["--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z", "--out", str(out)],
            "reversed",
        ),
        (["--from", "yesterday", "--out", str(out)], "malformed --from"),
        (
            [
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "2026-01-02T00:00:00Z",
                "--resolved-until",
                "2026-01-01T12:00:00Z",
                "--out",
                str(out),
            ],
            "before --to",
        ),
        (["--from", "2026-01-01T00:00:00Z", "--out", str(tmp_path / "a-file")], "is a file"),
        (
            ["--from", "2026-01-01T00:00:00Z", "--heartbeat-lookback", "0", "--out", str(out)],
            "--heartbeat-lookback",
        ),
        (["--from", "2026-01-01T00:00:00Z"], "--out"),
    ]
    for args, expected in cases:
        r = precast(env, "dataset", "build", *args)
        assert r.returncode == 2 and expected in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    for spec, expected in (
        (no_outcomes, "declares no [outcomes]"),
        (broken, "serving.default_label"),
    ):
        r = precast(
            {**env, "PRECAST_FLEET__SPEC": str(spec)},
            "dataset",
            "build",
            "--from",
            "2026-01-01T00:00:00Z",
            "--out",
            str(out),
        )
        assert r.returncode == 2 and expected in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) == 1, r.stderr
    r = precast(env, "dataset", "show", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no dataset folder" in r.stderr
