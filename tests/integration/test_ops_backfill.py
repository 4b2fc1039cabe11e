"""`precast backfill`: a time range of heartbeats through a chosen model version, outputs marked
backfill with lineage inside the range, nothing from outside it, live offsets untouched."""

from __future__ import annotations

import time

import orjson

from opsctl.toolkit.ranges import format_time
from precast.kafka import Admin, Producer
from producers.simulator import Fleet
from tests.integration.ops_support import cli_env, fresh_view, precast, read_all
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
        "precast-backfill-" in g.group_id for g in Admin(kafka_settings).consumer_groups()
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


def test_a_backfill_of_recent_events_never_outranks_the_live_answer_of_the_same_data(
    kafka_settings, redis_settings, topics, tmp_path
):
    """The runbook's `--from <an hour ago>`: every device's newest data is in the range. The
    live answers (model 1.0.0, computed from those heartbeats) stay served by a rebuild of Redis
    from the compacted topic and by a fresh API view; only `--outrank-live --yes` replaces them."""
    import time
    import uuid

    from precast.serving import RedisStore
    from precast.settings import RedisSettings
    from schemas.predictions import PredictionSet

    fleet = Fleet(devices=12, seed=5)
    producer = Producer(kafka_settings)
    now = int(time.time() * 1000)
    events = list(fleet.heartbeats(12, now - 2_000))
    for event in events:
        producer.produce(topics.heartbeats.name, event["device_id"].encode(), orjson.dumps(event))
    for event in events:  # what the live workers answered from exactly these heartbeats
        live = PredictionSet(
            device_id=event["device_id"],
            candidates=[{"strategy": "monitor_only", "score": 0.9}],
            model_version="1.0.0",
            computed_at_ms=event["event_time_ms"],
            valid_until_ms=event["event_time_ms"] + 600_000,
            produced_at_ms=now - 1_000,
            trigger="heartbeat",
        )
        producer.produce(
            topics.predictions.name, event["device_id"].encode(), live.model_dump_json().encode()
        )
    producer.flush()
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    key_prefix = f"{redis_settings.key_prefix}{uuid.uuid4().hex[:6]}:"
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
        PRECAST_MODEL__PROVIDER="cpu",
        PRECAST_WORKER__HORIZON_S="600",
        PRECAST_REDIS__URL=redis_settings.url,
        PRECAST_REDIS__KEY_PREFIX=key_prefix,
    )
    store = RedisStore.from_settings(RedisSettings(url=redis_settings.url, key_prefix=key_prefix))
    args = ["backfill", "--model", str(MODEL_110), "--offsets", "*:0-", "--events", "heartbeats"]

    def served_by_rebuild() -> set[str]:
        out = precast(env, "rebuild", "--wipe", "--yes", "--no-progress")
        assert out.returncode == 0, out.stderr
        return {e.model_version for _d, e in store.iterate()}

    def served_by_a_fresh_view() -> set[str]:
        view = fresh_view(kafka_settings, topics.predictions.name, 3)
        return {e.model_version for _d, e in view.iterate()}

    try:
        out = precast(env, *args, "--no-progress", timeout=180)
        assert out.returncode == 0, out.stderr
        backfilled = [
            orjson.loads(r[2])
            for recs in read_all(kafka_settings, topics.predictions.name).values()
            for r in recs
            if b'"backfill":true' in r[2]
        ]
        # same data time as the live answers, produced later: it would have won before
        assert len(backfilled) == 12
        live_at = {e["device_id"]: e["event_time_ms"] for e in events}
        assert all(p["computed_at_ms"] == live_at[p["device_id"]] for p in backfilled)
        assert all(p["produced_at_ms"] > now - 1_000 for p in backfilled)
        assert served_by_rebuild() == {"1.0.0"}
        assert served_by_a_fresh_view() == {"1.0.0"}

        asked = precast(env, *args, "--outrank-live", "--no-progress")
        assert asked.returncode == 0 and "add --yes" in asked.stdout, asked.stdout
        assert served_by_rebuild() == {"1.0.0"}
        done = precast(env, *args, "--outrank-live", "--yes", "--no-progress", timeout=180)
        assert done.returncode == 0, done.stderr
        assert served_by_rebuild() == {"1.1.0"}
        assert served_by_a_fresh_view() == {"1.1.0"}
    finally:
        store.clear()
