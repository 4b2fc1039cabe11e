"""`precast purge` and `precast rebuild` against the real broker and Redis: the semver selector
on real entries, purge markers that survive a rebuild (by the tool and by the read API's own
materializer), and newer predictions winning over a marker."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest

from precast.kafka import Producer
from precast.serving import RedisStore
from precast.settings import RedisSettings
from tests.integration.ops_support import cli_env, fresh_view, precast, read_all

VERSIONS = {
    "dev-a": "1.3.0",
    "dev-b": "1.3.7-rc.1",
    "dev-c": "v1.3.7-hotfix",
    "dev-d": "1.3.7+build.5",
    "dev-e": "1.30.0",
    "dev-f": "1.2.9",
    "dev-g": "1.4.0-rc.1",
    "dev-h": "13.0.0",
    "dev-i": "legacy-model",
}
PURGED = {"dev-a", "dev-b", "dev-c", "dev-d"}


def prediction(device: str, version: str, computed: int) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "model_version": version,
            "candidates": [{"strategy": "remote_restart", "score": 0.7}],
            "computed_at_ms": computed,
            "valid_until_ms": computed + 3_600_000,
            "produced_at_ms": computed + 5,
            "trigger": "heartbeat",
            "lineage": [],
        }
    )


@pytest.fixture
def env(kafka_settings, redis_settings, topics, tmp_path):
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    return cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
        PRECAST_REDIS__URL=redis_settings.url,
        PRECAST_REDIS__KEY_PREFIX=f"{redis_settings.key_prefix}{uuid.uuid4().hex[:6]}:",
    )


@pytest.fixture
def store(env):
    s = RedisStore.from_settings(
        RedisSettings(url=env["PRECAST_REDIS__URL"], key_prefix=env["PRECAST_REDIS__KEY_PREFIX"]),
        grace_ms=30_000,
    )
    yield s
    s.clear()


def _publish(kafka_settings, topic: str, items: list[tuple[str, str, int]]) -> None:
    p = Producer(kafka_settings)
    for device, version, computed in items:
        p.produce(topic, device.encode(), prediction(device, version, computed))
    p.flush()


def _served(store: RedisStore) -> dict[str, tuple[str, bool]]:
    return {d: (e.model_version, e.purge) for d, e in store.iterate()}


def test_purge_matrix_sticks_through_rebuilds(kafka_settings, topics, env, store):
    now = int(time.time() * 1000)
    _publish(
        kafka_settings,
        topics.predictions.name,
        [(d, v, now - 60_000) for d, v in VERSIONS.items()]
        + [(d, v, now - 30_000) for d, v in VERSIONS.items()],
    )
    built = precast(env, "rebuild", "--no-progress")
    assert built.returncode == 0, built.stderr
    assert {d: v for d, (v, _p) in _served(store).items()} == VERSIONS

    # Without --yes a purge only says what it would touch: topic, versions, counts.
    dry = precast(env, "purge", "v1.3.", "--no-progress")
    assert dry.returncode == 0, dry.stderr
    assert "would purge 4 served predictions" in dry.stdout
    assert "1 stored version(s) are not semantic versions" in dry.stdout
    assert f"4 purge markers to {topics.predictions.name}" in dry.stdout
    assert "newest answer produced" in dry.stdout and "1.3.7-rc.1" in dry.stdout
    assert all(not purged for _v, purged in _served(store).values()) and len(_served(store)) == 9
    assert not any(
        b'"purge"' in r[2]
        for rs in read_all(kafka_settings, topics.predictions.name).values()
        for r in rs
    )

    out = precast(env, "purge", "v1.3.", "--yes", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "purged 4 served predictions" in out.stdout
    served = _served(store)
    for d in PURGED:  # gone, or already replaced by the marker a materializer applied
        assert d not in served or served[d][1]
    assert {d: served[d][0] for d in VERSIONS.keys() - PURGED} == {
        d: VERSIONS[d] for d in VERSIONS.keys() - PURGED
    }
    markers = [
        orjson.loads(r[2])
        for recs in read_all(kafka_settings, topics.predictions.name).values()
        for r in recs
        if b'"purge"' in r[2]
    ]
    assert sorted(m["device_id"] for m in markers) == sorted(PURGED)
    assert all(m["candidates"] == [] and m["computed_at_ms"] == now - 30_000 for m in markers)

    # The read API's own rebuild (a fresh replica's materializer) keeps them purged...
    view = fresh_view(kafka_settings, topics.predictions.name, 3)
    assert {d for d, e in view.iterate() if e.purge} == PURGED
    assert {d for d, e in view.iterate() if not e.purge} == VERSIONS.keys() - PURGED
    # ...and so does a clean rebuild of the shared store (which asks first: it deletes).
    held = len(_served(store))
    asked = precast(env, "rebuild", "--wipe", "--no-progress")
    assert asked.returncode == 0 and f"--wipe would delete {held} stored" in asked.stdout
    assert len(_served(store)) == held and held > 0
    wiped = precast(env, "rebuild", "--wipe", "--yes", "--no-progress")
    assert wiped.returncode == 0, wiped.stderr
    served = _served(store)
    assert {d for d, (_v, p) in served.items() if p} == PURGED
    assert {d for d, (_v, p) in served.items() if not p} == VERSIONS.keys() - PURGED

    # A newer real prediction wins over the marker; purging the line again takes only it.
    _publish(kafka_settings, topics.predictions.name, [("dev-a", "1.3.8", now - 1_000)])
    assert precast(env, "rebuild", "--no-progress").returncode == 0
    assert _served(store)["dev-a"] == ("1.3.8", False)
    again = precast(env, "purge", "1.3", "--yes", "--no-progress")
    assert "purged 1 served predictions" in again.stdout, again.stdout
    assert "dev-a" not in _served(store) or _served(store)["dev-a"][1]
    assert precast(env, "rebuild", "--wipe", "--yes", "--no-progress").returncode == 0
    assert {d for d, (_v, p) in _served(store).items() if p} == PURGED


def test_purge_from_the_topic_without_redis(kafka_settings, topics, env):
    now = int(time.time() * 1000)
    _publish(
        kafka_settings, topics.predictions.name, [(d, v, now - 10_000) for d, v in VERSIONS.items()]
    )
    no_redis = {**env, "PRECAST_REDIS__URL": ""}
    dry = precast(no_redis, "purge", "1.3", "--dry-run", "--no-progress")
    assert dry.returncode == 0, dry.stderr
    assert "would purge 4 served predictions" in dry.stdout and "in the topic" in dry.stdout
    out = precast(no_redis, "purge", "=1.3.7", "--yes", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "purged 1 served predictions" in out.stdout  # 1.3.7+build.5 only: no pre-releases
    rebuild = precast(no_redis, "rebuild")
    assert rebuild.returncode == 2 and "needs the shared serving store" in rebuild.stderr


@pytest.mark.parametrize("selector", ["", "*", "1.3 || 1.4", "=1.3", ">=banana"])
def test_bad_selectors_fail_with_one_line(env, selector):
    out = precast(env, "purge", selector)
    assert out.returncode == 2
    assert out.stderr.startswith("precast: ") and out.stderr.count("\n") == 1, out.stderr
