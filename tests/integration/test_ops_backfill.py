"""`precast backfill`: a time range of heartbeats through a chosen model version, outputs marked
backfill with lineage inside the range, nothing from outside it, live offsets untouched."""

from __future__ import annotations

import time

import orjson

from opsctl.ranges import format_time
from precast.kafka import Admin, Producer
from producers.simulator import Fleet
from tests.integration.ops_support import cli_env, precast, read_all
from workers.settings import DEFAULT_MODEL_DIR

MODEL_110 = DEFAULT_MODEL_DIR.parent / "1.1.0"


def test_backfill_a_time_range_through_a_chosen_model(kafka_settings, topics, tmp_path):
    fleet = Fleet(devices=40, seed=3)
    producer = Producer(kafka_settings)
    # Ten minutes back, relative to now: record time = event time, and records older than the
    # heartbeats topic's retention (1 day) would be deleted by the broker's retention check.
    base = (int(time.time()) - 600) * 1000
    for minute in range(3):  # 40 heartbeats per minute; the backfill takes the middle minute
        for event in fleet.heartbeats(40, base + minute * 60_000):
            # Record time = event time, as a device that publishes its own timestamps would.
            producer.produce(
                topics.heartbeats.name,
                event["device_id"].encode(),
                orjson.dumps(event),
                timestamp_ms=event["event_time_ms"],
            )
    producer.flush()
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
        PRECAST_MODEL__PROVIDER="cpu",
    )
    args = [
        "backfill",
        "--model",
        str(MODEL_110),
        "--from",
        format_time(base + 60_000),
        "--to",
        format_time(base + 120_000),
        "--events",
        "heartbeats",
        "--no-progress",
    ]
    dry = precast(env, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "40 event records" in dry.stdout and "fleet-strategy 1.1.0" in dry.stdout
    assert sum(len(v) for v in read_all(kafka_settings, topics.predictions.name).values()) == 0

    out = precast(env, *args, timeout=180)
    assert out.returncode == 0, out.stderr
    heartbeats = read_all(kafka_settings, topics.heartbeats.name)
    in_range = {
        (topics.heartbeats.name, p, o)
        for p, recs in heartbeats.items()
        for o, _k, _v, _h, ts in recs
        if base + 60_000 <= orjson.loads(_v)["event_time_ms"] < base + 120_000
    }
    preds = [
        orjson.loads(r[2])
        for recs in read_all(kafka_settings, topics.predictions.name).values()
        for r in recs
    ]
    assert {p["device_id"] for p in preds} == set(fleet.ids)
    assert all(
        p["model_version"] == "1.1.0" and p["backfill"] is True and p["trigger"] == "backfill"
        for p in preds
    )
    refs = {(ref["topic"], ref["partition"], ref["offset"]) for p in preds for ref in p["lineage"]}
    assert refs and refs <= in_range
    assert all(p["computed_at_ms"] == base + 60_000 for p in preds)
    assert not any(
        g.group_id.startswith("precast-backfill-") for g in Admin(kafka_settings).consumer_groups()
    )


def test_backfill_refuses_a_missing_model(kafka_settings, topics, tmp_path):
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
    )
    out = precast(env, "backfill", "--model", str(tmp_path / "nope"), "--offsets", "*:0-")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no model at" in out.stderr
