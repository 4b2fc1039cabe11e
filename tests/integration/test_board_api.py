"""The board's API over real Kafka: fleet rows with context and device info, a device's history,
the board stream resuming after a reconnect (Last-Event-ID) or asking for a reload, and the
demo naming the board's URL first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2
import orjson

from consumer_api.cli import build
from opsctl.stack.process import free_port
from tests.integration.api_helpers import Served, api_settings, wait_for
from tests.integration.board_support import context, heartbeat, prediction, publish


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
                rows = {r[0]: r for r in fleet()["rows"]}
                return (
                    len(rows) == 3
                    and rows["dev-b"][10] == "critical"
                    and rows["dev-c"][8] is not None
                )

            wait_for(settled, what="three devices with context and info on the board")
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
            assert b["context"]["alarms"][0]["severity"] == "critical"
            assert b["context"]["open_work_orders"] == [
                {"work_order_id": "wo-1", "priority": "high"}
            ]
            panel = http.get(srv.url + "/v1/board/panel").json()
            assert (
                panel["freshness"]["devices"] == 3
                and panel["freshness"]["by_source"]["fallback"] == 1
            )
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
