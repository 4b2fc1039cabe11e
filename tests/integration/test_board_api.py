"""The board's API over real Kafka: fleet rows with context and device info, a device's history,
snapshots of another spec skipped and counted, a second fleet spec's columns, filters, detail
and lineage, the board stream resuming after a reconnect (Last-Event-ID) or asking for a
reload, and the demo naming the board's URL first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2
import orjson
from prometheus_client import REGISTRY

from consumer_api.cli import build
from opsctl.stack.process import free_port
from precast.settings import FleetSettings
from schemas.partitioning import partition_for
from tests.integration.api_helpers import Served, api_settings, wait_for
from tests.integration.board_support import (
    context,
    heartbeat,
    prediction,
    publish,
    snapshot,
    trailer_reading,
    trailers,
)


def _fed(topic: str, result: str) -> float:
    got = REGISTRY.get_sample_value(
        "precast_api_board_feed_records_total", {"topic": topic, "result": result}
    )
    return got or 0.0


def _frames(lines: Iterator[str]) -> Iterator[tuple[str, str | None, dict]]:
    """(event, id, data) of each SSE frame; comments skipped."""
    event, ident, data = "message", None, ""
    for line in lines:
        if line == "":
            if data:
                yield event, ident, orjson.loads(data)
            event, ident, data = "message", None, ""
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            data += line[6:]


def _rows_frames(frames) -> Iterator[tuple[int, set[str]]]:
    for event, ident, data in frames:
        if event == "rows":
            yield int(ident), {r[0] for r in data["rows"]}


def test_fleet_rows_context_info_and_history_from_kafka(kafka_settings, topics):
    now = int(time.time() * 1000)
    _, other = trailers()
    foreign_before = _fed("device_context", "foreign")
    invalid_before = _fed("device_context", "invalid")
    publish(
        kafka_settings,
        [
            (
                topics.predictions.name,
                "dev-a",
                prediction("dev-a", now - 5_000, ("remote_restart",), offset=1),
            ),
            (
                topics.predictions.name,
                "dev-a",
                prediction("dev-a", now - 1_000, ("replace_part",), offset=2),
            ),
            (topics.predictions.name, "dev-b", prediction("dev-b", now - 2_000, ("monitor_only",))),
            (
                topics.device_context.name,
                "dev-b",
                context("dev-b", now, {"wo-1": "high"}, {"al-1": (now, "critical")}),
            ),
            # another spec's snapshot and a version-1 one: foreign, never shown; a broken one
            (topics.device_context.name, "dev-f", snapshot(other, "dev-f", [], now)),
            (
                topics.device_context.name,
                "dev-g",
                orjson.dumps({"schema_version": 1, "device_id": "dev-g", "as_of_ms": now}),
            ),
            (topics.device_context.name, "dev-m", b'{"schema_version": 2, "context": "x'),
            # read by nobody here, counted by the board's rates
            (topics.work_orders.name, "dev-c", b"{}"),
            (topics.dead_letters.name, "dev-x", b"{}"),
        ],
    )
    built = build(api_settings(kafka_settings, topics))
    built.materializer.start()
    built.board_feed.start()
    try:
        with Served(built.app) as srv, httpx2.Client(timeout=20) as http:
            wait_for(lambda: http.get(srv.url + "/readyz").status_code == 200, what="ready")
            publish(
                kafka_settings,
                [(topics.heartbeats.name, "dev-c", heartbeat("dev-c", "site-x", "meter", now))],
            )

            def fleet(**params) -> dict:
                return http.get(srv.url + "/v1/board/fleet", params=params).json()

            def settled() -> bool:  # answers, the context snapshot and the heartbeat all read
                doc = fleet()
                rows = {r[0]: dict(zip(doc["columns"], r, strict=True)) for r in doc["rows"]}
                return (
                    len(rows) == 3
                    and rows["dev-b"]["alarm"] == "critical"
                    and rows["dev-c"]["site"] is not None
                )

            wait_for(settled, what="three devices with context and info on the board")
            # the rates' end offsets, every partition in one request (every 2 s): a heartbeat
            # and a work order, three answers over two partitions, a dead letter
            rates = built.board_feed.rates
            want = {"events": 2, "inferences": 3, "dead": 1}
            wait_for(lambda: rates.totals() == want, what=f"rates' totals {want}")
            assert rates.dead_letters_total == 1
            doc = fleet()
            rows = {r[0]: dict(zip(doc["columns"], r, strict=True)) for r in doc["rows"]}
            assert (
                rows["dev-a"]["strategy"] == "replace_part"
                and rows["dev-a"]["source"] == "precomputed"
            )
            assert rows["dev-b"]["alarm"] == "critical" and rows["dev-b"]["open_work_orders"] == 1
            assert (rows["dev-c"]["site"], rows["dev-c"]["device_type"]) == ("site-x", "meter")
            assert rows["dev-c"]["source"] == "fallback" and rows["dev-c"]["computed_at_ms"] is None
            assert doc["facets"]["site"] == ["site-x"]
            assert doc["layout"]["columns"] == doc["columns"]
            # the snapshots of dev-f, dev-g and dev-m were read: counted, not shown
            assert built.board_feed.foreign == 2
            assert _fed("device_context", "foreign") - foreign_before == 2
            assert _fed("device_context", "invalid") - invalid_before == 1
            assert [r[0] for r in fleet(alarm="critical")["rows"]] == ["dev-b"]
            assert [r[0] for r in fleet(sort="age_ms")["rows"]] == ["dev-a", "dev-b", "dev-c"]
            assert [r[0] for r in fleet(sort="device_id", order="desc", limit=2)["rows"]] == [
                "dev-c",
                "dev-b",
            ]

            a = http.get(srv.url + "/v1/board/devices/dev-a").json()
            assert [h["candidates"][0]["strategy"] for h in a["history"]] == [
                "replace_part",
                "remote_restart",
            ]
            b = http.get(srv.url + "/v1/board/devices/dev-b").json()
            (alarms,) = b["context"]["windows"]
            assert alarms["entries"][0]["alert"] == ["critical"]
            (wos,) = b["context"]["open"]
            assert [(e["id"], e["values"]) for e in wos["entities"]] == [
                ("wo-1", {"priority": "high"})
            ]
            c = http.get(srv.url + "/v1/board/devices/dev-c").json()
            assert c["fields"]["hw_model"] == "meter-r1" and c["context"] is None
            panel = http.get(srv.url + "/v1/board/panel").json()
            assert (
                panel["freshness"]["devices"] == 3
                and panel["freshness"]["by_source"]["fallback"] == 1
            )
    finally:
        built.board_feed.stop()
        built.materializer.stop()


def test_a_second_fleet_spec_gets_its_own_board(kafka_settings, topics):
    path, fleet = trailers()
    now = int(time.time() * 1000)
    reading = trailer_reading("tr-1", now, 3.25, depot="kiel", model="R1", door=True)
    part = partition_for(b"tr-1", topics.heartbeats.partitions)
    publish(kafka_settings, [(topics.heartbeats.name, "tr-1", reading)])
    faults = [("faults", {"event_id": "e1", "event_time_ms": now - 60_000, "fault_id": "F-7",
                          "level": "severe"})]  # fmt: skip
    publish(
        kafka_settings,
        [
            (
                topics.predictions.name,
                "tr-1",
                prediction(
                    "tr-1",
                    now,
                    ("defrost", "keep_running"),
                    lineage=(topics.heartbeats.name, part, 0, "x"),
                ),
            ),  # fmt: skip
            (topics.predictions.name, "tr-2", prediction("tr-2", now, ("send_mechanic",))),
            (topics.device_context.name, "tr-1", snapshot(fleet, "tr-1", faults, now)),
            # the built-in fleet's snapshot is foreign here
            (topics.device_context.name, "tr-2", context("tr-2", now, {"wo": "low"}, {})),
        ],
    )
    settings = api_settings(kafka_settings, topics).model_copy(
        update={"fleet": FleetSettings(spec=path)}
    )
    built = build(settings)
    built.materializer.start()
    built.board_feed.start()
    try:
        with Served(built.app) as srv, httpx2.Client(timeout=20) as http:
            wait_for(lambda: http.get(srv.url + "/readyz").status_code == 200, what="ready")

            def rows(**params) -> dict[str, dict]:
                doc = http.get(srv.url + "/v1/board/fleet", params=params).json()
                return {r[0]: dict(zip(doc["columns"], r, strict=True)) for r in doc["rows"]}

            wait_for(
                lambda: (
                    (r := rows()).get("tr-1", {}).get("alarm") == "fault"
                    and r["tr-1"]["depot"] == "kiel"
                ),
                what="the trailer's reading and context on the board",
            )
            doc = http.get(srv.url + "/v1/board/fleet").json()
            shown = [c["name"] for c in doc["layout"]["display"]]
            assert shown[6:] == ["depot", "box_temp_c", "door_open", "alarm", "days_since_visit",
                                 "last_visit_cost"]  # fmt: skip
            assert "site" not in doc["columns"] and "open_work_orders" not in doc["columns"]
            t1, t2 = rows()["tr-1"], rows()["tr-2"]
            assert (t1["box_temp_c"], t1["door_open"], t1["trailer_model"]) == (3.25, True, "R1")
            assert (t1["strategy"], t1["days_since_visit"]) == ("defrost", 365.0)
            assert (t2["alarm"], t2["depot"]) == ("none", None)  # its snapshot was foreign
            assert doc["facets"]["trailer_model"] == ["R1"] and doc["facets"]["alarm"] == [
                "fault", "none"]  # fmt: skip
            assert list(rows(trailer_model="R1")) == ["tr-1"]
            assert list(rows(alarm="fault", sort="box_temp_c")) == ["tr-1"]
            bad = http.get(srv.url + "/v1/board/fleet", params={"site": "x"})
            assert bad.status_code == 400 and bad.json()["parameter"] == "site"
            detail = http.get(srv.url + "/v1/board/devices/tr-1").json()
            assert detail["fields"] == {"depot": "kiel", "box_temp_c": 3.25, "door_open": True,
                                        "axles": 3, "trailer_model": "R1"}  # fmt: skip
            (window,) = detail["context"]["windows"]
            assert [(e["id"], e["alert"]) for e in window["entries"]] == [("F-7", ["fault"])]
            # the answer's input, read back from Kafka and through the trailers' spec
            (ev,) = http.get(srv.url + "/v1/board/devices/tr-1/events").json()["events"]
            assert ev["stream"] == "readings" and ev["event_time_ms"] == now
            assert ev["fields"]["box_temp_c"] == 3.25 and ev["fields"]["depot"] == "kiel"
            assert ev["event"]["box"] == {"temp": 3.25}  # the record as the device sent it
            openapi = http.get(srv.url + "/openapi.json").json()
            params = [p["name"] for p in openapi["paths"]["/v1/board/fleet"]["get"]["parameters"]]
            assert "trailer_model" in params and "site" not in params
    finally:
        built.board_feed.stop()
        built.materializer.stop()


def test_board_stream_resumes_after_a_reconnect_and_asks_for_a_reload_when_it_cannot(
    kafka_settings, topics
):
    now = int(time.time() * 1000)
    built = build(api_settings(kafka_settings, topics, sse_keepalive_s=0.5))
    built.materializer.start()
    try:
        with Served(built.app) as srv, httpx2.Client(timeout=20) as http:
            wait_for(lambda: http.get(srv.url + "/readyz").status_code == 200, what="ready")
            with http.stream("GET", srv.url + "/v1/board/stream") as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                frames = _frames(r.iter_lines())
                assert next(frames)[0] == "hello"
                publish(
                    kafka_settings, [(topics.predictions.name, "dev-x", prediction("dev-x", now))]
                )
                seq, devices = next(_rows_frames(frames))
                assert devices == {"dev-x"}
            # while the board is away: two more devices change
            publish(
                kafka_settings,
                [(topics.predictions.name, d, prediction(d, now)) for d in ("dev-y", "dev-z")],
            )
            wait_for(
                lambda: http.get(srv.url + "/v1/board/fleet").json()["total"] == 3, what="3 rows"
            )
            with http.stream(
                "GET", srv.url + "/v1/board/stream", headers={"Last-Event-ID": str(seq)}
            ) as r:
                frames = _frames(r.iter_lines())
                hello = next(frames)
                assert hello[0] == "hello" and hello[1] == str(seq)
                resumed_seq, devices = next(_rows_frames(frames))
                assert devices == {"dev-y", "dev-z"} and resumed_seq >= seq + 2  # not dev-x again
            # a sequence this replica never issued (another replica, a restart): reload
            with http.stream(
                "GET", srv.url + "/v1/board/stream", params={"last_event_id": "99999999"}
            ) as r:
                frames = _frames(r.iter_lines())
                events = [next(frames)[0] for _ in range(3)]
                assert "reset" in events
    finally:
        built.materializer.stop()


def test_demo_names_the_board_first():
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "PRECAST_KAFKA__CONNECT_TIMEOUT_S": "1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "demo", "--no-stack", "--port", "8765"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.stdout.splitlines()[0].startswith("board: http://127.0.0.1:8765/board/"), run.stdout
