"""The read API against the real broker: known devices ask once per window, unknown ones never, newest-wins from
out-of-order Kafka deliveries, dead letters, restart and rebuild, live updates over SSE."""

from __future__ import annotations

import time

import httpx2
import orjson
from starlette.testclient import TestClient

from consumer_api.cli import build
from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset
from schemas.predictions import PrecomputeRequest
from tests.integration.api_helpers import Served, api_settings, prediction_value, publish, wait_for


def read_all(kafka, topic: str, partitions: int, group: str, settle_s: float = 2.0) -> list:
    """Every record up to the end offsets seen at the call (however long a busy broker takes to
    hand them over), then whatever else arrives until `settle_s` passes without a record."""
    c = Consumer(kafka, group)
    parts = [TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
    c.assign(parts)
    ends = {p: c.watermarks(topic, p)[1] for p in range(partitions)}

    def behind() -> bool:  # the position also moves past transaction markers
        return any(ends[q.partition] > max(q.offset, 0) for q in c.position(parts))

    out, quiet_since, deadline = [], time.monotonic(), time.monotonic() + 60
    while time.monotonic() - quiet_since < settle_s or (behind() and time.monotonic() < deadline):
        msgs = c.consume(1000, 0.2)
        if msgs:
            out += msgs
            quiet_since = time.monotonic()
    c.close()
    return out


def test_known_devices_ask_once_per_window_and_unknown_devices_never_ask(
    kafka_settings, topics, unique
):
    now = int(time.time() * 1000)
    publish(  # two answers expired (still within the grace) and a purge marker
        kafka_settings,
        topics.predictions.name,
        [
            (
                "dev-exp-1",
                prediction_value("dev-exp-1", now - 20_000, now - 19_000, horizon_ms=5_000),
            ),
            (
                "dev-exp-2",
                prediction_value("dev-exp-2", now - 20_000, now - 19_000, horizon_ms=5_000),
            ),
            ("dev-purged", prediction_value("dev-purged", now - 100, now - 50, purge=True)),
        ],
    )
    built = build(api_settings(kafka_settings, topics, request_window_s=60, grace_s=600))
    built.materializer.start()
    try:
        with TestClient(built.app) as client:
            wait_for(lambda: client.get("/readyz").status_code == 200, what="ready")
            for _ in range(30):  # repeated reads of an expired answer, no newer data
                assert client.get("/v1/devices/dev-exp-1/prediction").json()["source"] == "stale"
                ghost = client.get("/v1/devices/dev-ghost/prediction").json()
                assert (ghost["source"], ghost["reason"]) == ("fallback", "unknown_device")
            client.get("/v1/predictions", params={"ids": "dev-exp-1,dev-exp-2,dev-ghost-2"})
            r = client.post(
                "/v1/prefetch", json={"device_ids": ["dev-exp-2", "dev-purged", "dev-ghost-3"]}
            )
            assert r.json() == {
                "sent": 1,
                "deduplicated": 1,
                "dropped": 0,
                "over_budget": 0,
                "fresh": 0,
                "unknown": 1,
            }
    finally:
        built.materializer.stop()
    msgs = read_all(
        kafka_settings,
        topics.precompute_requests.name,
        topics.precompute_requests.partitions,
        unique("chk"),
    )
    reqs = [PrecomputeRequest.model_validate_json(m.value()) for m in msgs]
    assert {r.device_id: r.reason for r in reqs} == {
        "dev-exp-1": "expiry",
        "dev-exp-2": "expiry",
        "dev-purged": "prefetch",
    }
    assert len(reqs) == 3
    assert all(m.key() == r.device_id.encode() for m, r in zip(msgs, reqs, strict=True))


def test_newest_wins_over_kafka_and_bad_records_are_dead_lettered(kafka_settings, topics, unique):
    now = int(time.time() * 1000)
    records = [  # out of order, duplicated, a late older one, a tie broken by produced_at, a bad one
        ("dev-1", prediction_value("dev-1", now - 100, now - 50, "1.0.0")),
        ("dev-1", prediction_value("dev-1", now - 300, now - 10, "9.0.0")),
        ("dev-1", prediction_value("dev-1", now - 100, now - 50, "1.0.0")),
        ("dev-2", prediction_value("dev-2", now - 100, now - 40)),
        ("dev-2", prediction_value("dev-2", now - 100, now - 60)),
        ("dev-3", b"{not json"),
    ]
    publish(kafka_settings, topics.predictions.name, records)
    built = build(api_settings(kafka_settings, topics))
    built.materializer.start()
    try:
        with TestClient(built.app) as client:
            wait_for(lambda: client.get("/readyz").status_code == 200, what="ready")
            one = client.get("/v1/devices/dev-1/prediction").json()
            two = client.get("/v1/devices/dev-2/prediction").json()
            assert (one["computed_at_ms"], one["model_version"]) == (now - 100, "1.0.0")
            assert two["produced_at_ms"] == now - 40
            assert client.get("/v1/devices/dev-3/prediction").json()["source"] == "fallback"
    finally:
        built.materializer.stop()
    dead = read_all(
        kafka_settings, topics.dead_letters.name, topics.dead_letters.partitions, unique("dlq")
    )
    assert [(m.key(), m.value(), dict(m.headers())["dlq.reason"]) for m in dead] == [
        (b"dev-3", b"{not json", b"not_json")
    ]


def test_restart_is_not_ready_until_rebuilt_then_gives_the_same_answers(kafka_settings, topics):
    now = int(time.time() * 1000)
    devices = [f"dev-{i:04d}" for i in range(3000)]
    publish(
        kafka_settings,
        topics.predictions.name,
        [(d, prediction_value(d, now - 1000 + i % 7, now)) for i, d in enumerate(devices)],
    )
    sample = ",".join(devices[::60])

    def answers(client) -> list[dict]:
        got = client.get("/v1/predictions", params={"ids": sample}).json()["predictions"]
        return [{k: v for k, v in a.items() if k not in ("age_ms", "delay_origin")} for a in got]

    before = None
    for _ in range(2):  # first start, then a restart with a fresh view
        built = build(api_settings(kafka_settings, topics))
        with TestClient(built.app) as client:
            assert client.get("/readyz").status_code == 503  # nothing read yet
            built.materializer.start()
            body = wait_for(
                lambda c=client: c.get("/readyz").status_code == 200 and c.get("/readyz").json(),
                what="ready",
            )
            assert body["lag"] == 0 and body["devices"] == len(devices)
            got = answers(client)
        built.materializer.stop()
        assert all(a["source"] == "precomputed" for a in got)
        assert before is None or got == before
        before = got


def test_event_stream_sends_current_then_newer_answers(kafka_settings, topics):
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        topics.predictions.name,
        [("dev-s1", prediction_value("dev-s1", now - 500, now - 400))],
    )
    built = build(api_settings(kafka_settings, topics, sse_keepalive_s=0.5))
    built.materializer.start()
    try:
        with Served(built.app) as srv, httpx2.Client(timeout=20) as http:
            wait_for(lambda: http.get(srv.url + "/readyz").status_code == 200, what="ready")
            with http.stream("GET", srv.url + "/v1/stream", params={"ids": "dev-s1,dev-s2"}) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                events = _events(r.iter_lines())
                first = [next(events), next(events)]
                assert [(e["device_id"], e["source"]) for e in first] == [
                    ("dev-s1", "precomputed"),
                    ("dev-s2", "fallback"),
                ]
                publish(
                    kafka_settings,
                    topics.predictions.name,
                    [
                        ("dev-s2", prediction_value("dev-s2", now - 100, now)),
                        ("dev-s1", prediction_value("dev-s1", now - 900, now)),
                    ],
                )  # older: never streamed
                update = next(events)
                assert (update["device_id"], update["source"], update["computed_at_ms"]) == (
                    "dev-s2",
                    "precomputed",
                    now - 100,
                )
    finally:
        built.materializer.stop()


def test_event_streams_are_capped_per_replica(kafka_settings, topics):
    built = build(api_settings(kafka_settings, topics, sse_keepalive_s=0.5, sse_max_streams=1))
    built.materializer.start()
    try:
        with Served(built.app) as srv, httpx2.Client(timeout=20) as http:
            wait_for(lambda: http.get(srv.url + "/readyz").status_code == 200, what="ready")
            with http.stream("GET", srv.url + "/v1/stream", params={"ids": "dev-c1"}) as first:
                events = _events(
                    first.iter_lines()
                )  # held: a collected generator closes the stream
                assert next(events)["device_id"] == "dev-c1"
                refused = http.get(srv.url + "/v1/stream", params={"ids": "dev-c2"})
                assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
                assert refused.json()["error"] == "too_many_streams"

            # the closed stream gives its place back (the server notices on its next write)
            def accepted():
                with http.stream("GET", srv.url + "/v1/stream", params={"ids": "dev-c2"}) as again:
                    return (
                        again.status_code == 200
                        and next(_events(again.iter_lines()))["device_id"] == "dev-c2"
                    )

            wait_for(accepted, what="a new stream accepted after the first closed")
    finally:
        built.materializer.stop()


def _events(lines):
    """Parsed `data:` payloads; keepalive comments are skipped."""
    for line in lines:
        if line.startswith("data: "):
            yield orjson.loads(line[6:])


def test_a_random_id_flood_writes_nothing(kafka_settings, topics, unique):
    import uuid

    built = build(
        api_settings(kafka_settings, topics, batch_max=500, client_prefetch_per_s=100_000)
    )
    built.materializer.start()
    try:
        with TestClient(built.app) as client:
            wait_for(lambda: client.get("/readyz").status_code == 200, what="ready")
            for _ in range(200):
                r = client.get(f"/v1/devices/{uuid.uuid4().hex}/prediction").json()
                assert r["reason"] == "unknown_device"
            for _ in range(6):
                ids = [uuid.uuid4().hex for _ in range(500)]
                batch = client.get("/v1/predictions", params={"ids": ",".join(ids)}).json()
                assert {a["reason"] for a in batch["predictions"]} == {"unknown_device"}
                hint = client.post("/v1/prefetch", json={"device_ids": ids}).json()
                assert hint["unknown"] == 500 and hint["sent"] == 0
            assert len(built.service.view) == 0
    finally:
        built.materializer.stop()
    for t in (topics.precompute_requests, topics.predictions):
        assert read_all(kafka_settings, t.name, t.partitions, unique("chk"), settle_s=1.0) == []
