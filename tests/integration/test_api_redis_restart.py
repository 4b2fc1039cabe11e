"""Redis dies and comes back empty (a PRIVATE Redis on a free port; never the shared one):
reads are flagged fallback (Redis-backed replicas) or unaffected (local view), and the shared
store is rebuilt from the topic without restarting the API."""

from __future__ import annotations

import time

import pytest

from opsctl.settings import StackSettings
from opsctl.stack.process import free_port
from opsctl.stack.redis_node import RedisNode
from tests.integration.api_helpers import api_over_redis, prediction_value, publish, wait_for

DEVICES = [f"dev-r{i:03d}" for i in range(200)]


@pytest.fixture
def private_redis(tmp_path):
    node = RedisNode(StackSettings(home=tmp_path, redis_port=free_port()))
    node.start()
    node.wait_ready(20)
    try:
        yield node
    finally:
        node.proc.stop(timeout=10, hard=True)


@pytest.mark.parametrize("local_view", [False, True], ids=["redis-reads", "local-view"])
def test_redis_restart_then_recovery_without_api_restart(
    kafka_settings, topics, private_redis, local_view
):
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        topics.predictions.name,
        [(d, prediction_value(d, now - 200, now - 100)) for d in DEVICES],
    )
    one = "/v1/devices/dev-r007/prediction"
    with api_over_redis(kafka_settings, topics, private_redis.url, local_view=local_view) as (
        client,
        store,
    ):
        wait_for(lambda: client.get("/readyz").status_code == 200, what="ready")
        wait_for(lambda: store.loaded() and store.count() == len(DEVICES), what="Redis loaded")
        assert client.get(one).json()["source"] == "precomputed"

        private_redis.proc.stop(timeout=10, hard=True)  # kill -9: the data is gone with it
        body = client.get(one).json()
        if local_view:
            assert body["source"] == "precomputed"  # reads never touch Redis
        else:
            assert (body["source"], body["reason"], body["delay_origin"]) == (
                "fallback",
                "store_unavailable",
                "fallback",
            )
            batch = client.get("/v1/predictions", params={"ids": "dev-r001,dev-r002"}).json()[
                "predictions"
            ]
            assert {a["reason"] for a in batch} == {"store_unavailable"}
        wait_for(
            lambda: client.get("/readyz").json()["redis"] == "down", what="redis reported down"
        )

        private_redis.start()  # same port, empty
        private_redis.wait_ready(20)
        wait_for(
            lambda: client.get(one).json()["source"] == "precomputed", what="answers recovered"
        )
        wait_for(lambda: store.count() == len(DEVICES) and store.loaded(), what="Redis replayed")
        assert client.get("/readyz").json()["redis"] == "up"
        assert all(
            a["source"] == "precomputed"
            for a in client.get("/v1/predictions", params={"ids": ",".join(DEVICES[:100])}).json()[
                "predictions"
            ]
        )
