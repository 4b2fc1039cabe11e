"""Helpers for read-API integration tests: settings for a test topic catalog, predictions
published to Kafka, a real uvicorn server on a thread, the app in process over Redis."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import orjson
from starlette.testclient import TestClient

from consumer_api.cli import build
from consumer_api.settings import ApiOptions, ApiSettings
from opsctl.stack.process import free_port
from precast.kafka import Producer
from precast.serving import RedisStore
from precast.settings import KafkaSettings, RedisSettings, TopicSettings


def api_settings(
    kafka: KafkaSettings, topics, redis_url: str = "", key_prefix: str = "t:", **api
) -> ApiSettings:
    prefix = topics.predictions.name.removesuffix("predictions")
    return ApiSettings(
        kafka=kafka,
        topics=TopicSettings(prefix=prefix, partitions=topics.predictions.partitions),
        redis=RedisSettings(url=redis_url, key_prefix=key_prefix, connect_timeout_s=1),
        api=ApiOptions(**api),
    )


@contextlib.contextmanager
def api_over_redis(
    kafka: KafkaSettings, topics, redis_url: str, **api
) -> Iterator[tuple[TestClient, RedisStore]]:
    """The read API in process over a Redis store, its materializer running: (TestClient, the
    RedisStore); the materializer stops after."""
    settings = api_settings(kafka, topics, redis_url=redis_url, **api)
    built = build(settings)
    store = RedisStore.from_settings(settings.redis)
    built.materializer.start()
    try:
        with TestClient(built.app) as client:
            yield client, store
    finally:
        built.materializer.stop()
        store.client.close()


def prediction_value(
    device: str,
    computed: int,
    produced: int,
    version: str = "1.0.0",
    horizon_ms: int = 600_000,
    purge: bool = False,
) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [] if purge else [{"strategy": "replace_part", "score": 0.6}],
            "model_version": version,
            "computed_at_ms": computed,
            "valid_until_ms": computed + horizon_ms,
            "produced_at_ms": produced,
            "trigger": "purge" if purge else "heartbeat",
            "lineage": [],
        }
    )


def publish(kafka: KafkaSettings, topic: str, records: list[tuple[str, bytes]]) -> None:
    p = Producer(kafka)
    for key, value in records:
        p.produce(topic, key.encode(), value)
    p.flush()


def wait_for(predicate, timeout: float = 30.0, every: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Served:
    """uvicorn serving an ASGI app on a free port, on a background thread."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                access_log=False,
                lifespan="on",
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Served:
        self.thread.start()
        wait_for(lambda: self.server.started, 10, what="uvicorn start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def spawn_api(kafka, topics, port: int, **env: str):
    """`precast-api` as its own process (uvicorn, in-memory view) on `port`; ready on return.
    The caller terminates it."""
    import os
    import subprocess
    import sys

    import httpx2

    e = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_REDIS__URL": "",
        "PRECAST_API__SERVER": "uvicorn",
        "PRECAST_API__PORT": str(port),
        "PRECAST_LOG_LEVEL": "WARNING",
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "consumer_api.cli"],
        env=e,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        try:
            return httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
        except httpx2.TransportError:
            assert proc.poll() is None, f"precast-api exited with {proc.returncode}"
            return False

    wait_for(ready, 60, 0.1, what="API ready")
    return proc
