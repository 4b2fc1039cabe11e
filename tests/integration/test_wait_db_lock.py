"""The read path measures its wait on the store (issue 26, `db_lock`): a Redis-backed replica's
answer says in its `wait.db_lock` Server-Timing entry how long the GET took, and a stalled
Redis (CLIENT PAUSE on a PRIVATE Redis, never the shared one) shows there — in the wait, not
in the answer's age."""

from __future__ import annotations

import time

import redis

from tests.integration.api_helpers import api_over_redis, prediction_value, publish, wait_for
from tests.integration.test_api_redis_restart import private_redis  # noqa: F401  (fixture)


def _timing(header: str) -> dict[str, float]:
    return {
        name: float(dur)
        for name, _, dur in (part.partition(";dur=") for part in header.split(", "))
    }


def test_a_stalled_store_shows_in_the_wait_not_the_age(kafka_settings, topics, private_redis):  # noqa: F811
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        topics.predictions.name,
        [("dev-w1", prediction_value("dev-w1", now - 200, now - 100))],
    )
    one = "/v1/devices/dev-w1/prediction"
    with api_over_redis(kafka_settings, topics, private_redis.url, local_view=False) as (
        client,
        store,
    ):
        wait_for(lambda: store.loaded() and store.count() == 1, what="Redis loaded")
        wait_for(lambda: client.get(one).json()["source"] == "precomputed", what="answer")
        calm = _timing(client.get(one).headers["server-timing"])
        assert calm["wait.db_lock"] < 100 and calm["wait.read"] < 100, calm

        # Redis stops answering every client for 700 ms, and a read comes in.
        with redis.Redis.from_url(private_redis.url) as pauser:
            pauser.execute_command("CLIENT", "PAUSE", 700, "ALL")
        r = client.get(one)
        stalled = _timing(r.headers["server-timing"])
        assert r.json()["source"] == "precomputed"
        assert 500 <= stalled["wait.db_lock"] < 5_000, stalled
        assert stalled["wait.read"] < 100, stalled
        # the age is the data's: it grew by the time that passed, the stall is not in it
        ages = [k for k in stalled if k.startswith("age.")]
        assert sorted(ages) == ["age.cache", "age.kafka", "age.model", "age.queue"]
        batch = client.get("/v1/predictions", params={"ids": "dev-w1,dev-w2"})
        assert _timing(batch.headers["server-timing"])["wait.db_lock"] < 100
