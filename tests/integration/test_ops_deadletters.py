"""`precast deadletters`: list by reason, inspect, export losslessly, redrive exactly once."""

from __future__ import annotations

import base64
import json
import time

import pytest

from precast.deadletter import DeadLetters
from precast.kafka import Producer, Record
from schemas.deadletters import Reason
from tests.integration.ops_support import cli_env, precast, read_all


@pytest.fixture
def dead(kafka_settings, topics):
    """30 dead letters: 20 not_json from heartbeats (one keyless), 10 invalid from alarms."""
    producer = Producer(kafka_settings)
    dlq = DeadLetters(producer, topics.dead_letters.name, "test-worker")
    originals, now = [], int(time.time() * 1000)
    for i in range(30):
        src = topics.heartbeats.name if i < 20 else topics.alarms.name
        key = None if i == 3 else f"dev-{i % 7:03d}".encode()
        rec = Record(
            src,
            i % 3,
            1000 + i,
            key,
            b"\xffnot json %d" % i,
            [("traceparent", b"tp-%d" % i)],
            now - 3_600_000 + i,  # relative to now, like every record time in tests
        )
        dlq.send(rec, Reason.NOT_JSON if i < 20 else Reason.INVALID, f"detail {i}")
        originals.append(rec)
    producer.flush()
    return originals


@pytest.fixture
def env(kafka_settings, topics, tmp_path):
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    return cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
    )


def test_list_counts_by_reason_and_filters(dead, env):
    out = precast(env, "deadletters", "list", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "30 dead letters match" in out.stdout
    assert any(
        ln.split()[:3] == ["not_json", "test-worker", "20"] for ln in out.stdout.splitlines()
    )
    assert any(ln.split()[:3] == ["invalid", "test-worker", "10"] for ln in out.stdout.splitlines())
    only = precast(
        env, "deadletters", "list", "--reason", "invalid", "--device", "dev-001", "--no-progress"
    )
    want = sum(1 for i in range(20, 30) if i % 7 == 1)
    assert f"{want} dead letters match" in only.stdout
    bad = precast(env, "deadletters", "list", "--reason", "no_such_reason")
    assert (
        bad.returncode == 2
        and bad.stderr.count("\n") == 1
        and "unknown dead-letter reason" in bad.stderr
    )


def test_export_is_lossless_and_inspect_shows_one(dead, env, tmp_path):
    out_file = tmp_path / "dl.jsonl"
    out = precast(
        env,
        "deadletters",
        "export",
        "--out",
        str(out_file),
        "--reason",
        "not_json",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(rows) == 20
    by_value = {base64.b64decode(r["value_b64"]): r for r in rows}
    for rec in dead[:20]:
        row = by_value[rec.value()]
        key = None if row["key_b64"] is None else base64.b64decode(row["key_b64"])
        assert key == rec.key()
        assert [(k, base64.b64decode(v)) for k, v in row["headers"]] == rec.headers()
        assert row["dead_letter"]["source.offset"] == str(rec.offset())
        assert row["value_text"] is None  # not UTF-8: only the base64 form

    first = rows[0]
    shown = precast(env, "deadletters", "inspect", f"{first['partition']}:{first['offset']}")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["dead_letter"]["reason"] == "not_json"
    missing = precast(env, "deadletters", "inspect", "0:999999")
    assert missing.returncode == 2 and "no dead letter at" in missing.stderr


def test_redrive_sends_originals_back_once(dead, env, kafka_settings, topics):
    dry = precast(
        env, "deadletters", "redrive", "--reason", "not_json", "--dry-run", "--no-progress"
    )
    assert dry.returncode == 0, dry.stderr
    assert "20 dead letters would be sent" in dry.stdout
    assert sum(len(v) for v in read_all(kafka_settings, topics.heartbeats.name).values()) == 0

    # without --yes it only counts, like --dry-run
    asked = precast(env, "deadletters", "redrive", "--reason", "not_json", "--no-progress")
    assert asked.returncode == 0 and "20 dead letters would be sent" in asked.stdout
    assert sum(len(v) for v in read_all(kafka_settings, topics.heartbeats.name).values()) == 0

    out = precast(env, "deadletters", "redrive", "--reason", "not_json", "--yes", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "sent 20 dead letters" in out.stdout
    back = [r for recs in read_all(kafka_settings, topics.heartbeats.name).values() for r in recs]
    got = sorted((k or b"", v, tuple(h)) for _o, k, v, h, _t in back)
    want = sorted((r.key() or b"", r.value(), tuple(r.headers())) for r in dead[:20])
    assert got == want  # original key (none for the keyless one), value and headers; no dlq.*
    assert any(k is None for _o, k, _v, _h, _t in back)
    assert sum(len(v) for v in read_all(kafka_settings, topics.alarms.name).values()) == 0

    again = precast(env, "deadletters", "redrive", "--reason", "not_json", "--yes", "--no-progress")
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert sum(len(v) for v in read_all(kafka_settings, topics.heartbeats.name).values()) == 20


def test_redrive_goes_only_back_to_the_catalog_topic_a_record_came_from(
    env, kafka_settings, topics, topic_factory
):
    producer = Producer(kafka_settings)
    dlq = DeadLetters(producer, topics.dead_letters.name, "test-worker")
    elsewhere = topic_factory("elsewhere", 3)
    ts = 1_750_000_000_000
    for source, key in (
        (elsewhere, b"dev-1"),  # outside the catalog
        (topics.dead_letters.name, b"dev-2"),  # would pour the topic into itself
        (topics.alarms.name, b"dev-3"),  # the one that goes back
    ):
        dlq.send(Record(source, 0, 7, key, b"{}", [], ts), Reason.INVALID, "detail")
    producer.flush()

    out = precast(env, "deadletters", "redrive", "--yes", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "2 selected dead letters stay where they are" in out.stdout, out.stdout
    assert "outside this deployment's catalog" in out.stdout
    assert "dead-letter topic itself" in out.stdout
    assert "sent 1 dead letters" in out.stdout
    total = lambda t: sum(len(v) for v in read_all(kafka_settings, t).values())  # noqa: E731
    assert (total(elsewhere), total(topics.alarms.name), total(topics.dead_letters.name)) == (
        0,
        1,
        3,
    )

    # no other source topic, and no other target than the record's own source
    other = precast(env, "deadletters", "redrive", "--topic", elsewhere, "--yes")
    assert other.returncode == 2 and "only this deployment's dead-letter topic" in other.stderr
    assert other.stderr.count("\n") == 1
    gone = precast(env, "deadletters", "redrive", "--to-topic", elsewhere, "--yes")
    assert gone.returncode == 2 and "--to-topic" in gone.stderr
