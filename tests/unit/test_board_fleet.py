"""The board's fleet index: rows, bounds (history, change log, pending per subscriber),
resumption, context parsing and the board endpoints over an in-memory service."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from starlette.testclient import TestClient

from consumer_api.fleet import COLUMNS, FleetIndex, parse_context
from tests.api_fixtures import make_app, make_board, make_service, now_ms, prediction
from tests.integration.board_support import context


def _index(**kw) -> FleetIndex:
    return FleetIndex(default_strategy="monitor_only", serve_stale=True, grace_ms=30_000, **kw)


def _row(index: FleetIndex, d: str, now: int) -> dict:
    return dict(zip(COLUMNS, index.row(d, now), strict=True))


def test_rows_follow_source_expiry_and_context():
    ix, now = _index(), now_ms()
    ix.stored([("dev-1", prediction("dev-1", now - 100, horizon_ms=1_000))])
    ix.set_info("dev-2", "north", "meter")
    assert _row(ix, "dev-1", now)["source"] == "precomputed"
    assert _row(ix, "dev-1", now)["strategy"] == "remote_restart"
    assert _row(ix, "dev-1", now + 2_000)["source"] == "stale"  # past valid_until, in grace
    assert _row(ix, "dev-1", now + 60_000)["source"] == "fallback"  # past grace
    r2 = _row(ix, "dev-2", now)
    assert (r2["source"], r2["strategy"], r2["site"], r2["device_type"]) == (
        "fallback",
        "monitor_only",
        "north",
        "meter",
    )
    _, ctx = parse_context(context("dev-2", now, {"wo": "low"}, {"a": (now - 10, "warning")}))
    ix.set_context("dev-2", ctx)
    assert (_row(ix, "dev-2", now)["alarm"], _row(ix, "dev-2", now)["open_work_orders"]) == (
        "warning",
        1,
    )
    _, old = parse_context(context("dev-2", now, {}, {"a": (now - 2 * 3_600_000, "critical")}))
    assert old.alarm_state() == "none"  # outside the hour before the newest event


def test_history_is_bounded_by_depth_and_devices():
    ix, now = _index(history_depth=3, history_devices=2), now_ms()
    for i in range(5):
        ix.stored([("dev-1", prediction("dev-1", now + i))])
    history = ix.detail("dev-1")["history"]
    assert [h["computed_at_ms"] for h in history] == [now + 4, now + 3, now + 2]  # newest first
    ix.stored([("dev-2", prediction("dev-2", now))])
    assert len(ix.detail("dev-2")["history"]) == 1  # one answer: nothing kept beyond it
    for d in ("dev-2", "dev-3", "dev-3"):
        ix.stored([(d, prediction(d, now_ms() + 10))])
    # dev-1's older answers were the least recently updated: forgotten, its newest stays
    assert [h["computed_at_ms"] for h in ix.detail("dev-1")["history"]] == [now + 4]
    assert len(ix.detail("dev-2")["history"]) == 2


def test_query_filters_sorts_and_pages():
    ix, now = _index(), now_ms()
    for i in range(10):
        d = f"dev-{i}"
        ix.stored([(d, prediction(d, now - i * 10))])
        ix.set_info(d, "north" if i % 2 else "south", "meter")
    total, rows = ix.query(now, filters={"site": "north"}, sort="age_ms", limit=2, offset=1)
    assert total == 5 and [r[0] for r in rows] == ["dev-3", "dev-5"]
    _, rows = ix.query(now, sort="device_id", descending=True, limit=1)
    assert rows[0][0] == "dev-9"
    assert ix.facets()["site"] == ["north", "south"]
    exact = ix.freshness(now)
    assert exact["by_source"] == {"precomputed": 10, "stale": 0, "fallback": 0}
    assert exact["median_age_ms"] == 50 and not exact["sampled"]
    est = ix.freshness(now, sample=4)  # a sample, scaled to the fleet
    assert est["sampled"] and est["devices"] == 10 and est["by_source"]["precomputed"] == 10


def test_subscribers_resume_from_the_log_and_reload_past_its_bounds():
    async def run() -> None:
        ix, now = _index(log_size=4), now_ms()
        for d in ("a", "b"):
            ix.stored([(d, prediction(d, now))])
        seq = ix.seq
        ix.stored([("c", prediction("c", now))])
        sub, _ = ix.subscribe(queue_max=10, last_seq=seq)
        assert ix.take(sub)[:2] == ({"c"}, False)
        ix.unsubscribe(sub)
        for d in "defgh":  # the log keeps 4 changes: seq is out of reach now
            ix.stored([(d, prediction(d, now))])
        late, _ = ix.subscribe(queue_max=10, last_seq=seq)
        assert ix.take(late)[1] is True
        future, _ = ix.subscribe(queue_max=10, last_seq=ix.seq + 5)
        assert ix.take(future)[1] is True
        small, _ = ix.subscribe(queue_max=2, last_seq=None)
        for d in "xyz":  # a burst past the bound: no queue, a reload
            ix.stored([(d, prediction(d, now))])
        pending, overflow, _, _ = ix.take(small)
        assert (pending, overflow) == (set(), True)
        ix.stored([("x", prediction("x", now + 1)), ("x", prediction("x", now + 2))])
        assert ix.take(small)[:2] == ({"x"}, False)  # coalesced: one row per device

    asyncio.run(run())


@pytest.mark.parametrize(
    "raw",
    [b"[]", b'{"schema_version": 2}', b'{"schema_version": 1, "device_id": "d"}', b"not json"],
)
def test_malformed_context_is_refused(raw):
    with pytest.raises((ValueError, KeyError, TypeError)):
        parse_context(raw)


def test_board_page_is_served_with_a_strict_content_security_policy():
    svc = make_service()
    client = TestClient(make_app(svc))
    page = client.get("/board/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert b'src="board.js"' in page.content and b"http" not in page.content.split(b"<body>")[0]
    assert client.get("/board/board.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/board", follow_redirects=False).headers["location"] == "/board/"


def test_board_endpoints_over_an_in_memory_service():
    svc = make_service(auth_token="t0k")
    board = make_board(svc, panel_s=0)
    client = TestClient(make_app(svc, board))
    auth = {"Authorization": "Bearer t0k"}
    now = now_ms()
    board.index.stored([("dev-1", prediction("dev-1", now - 50))])
    assert client.get("/board/").status_code == 200  # the page holds no data: no token
    assert client.get("/v1/board/fleet").status_code == 401
    doc = client.get("/v1/board/fleet", headers=auth).json()
    assert doc["total"] == 1 and doc["seq"] == 1 and doc["columns"] == list(COLUMNS)
    detail = client.get("/v1/board/devices/dev-1", headers=auth).json()
    assert detail["history"][0]["computed_at_ms"] == now - 50
    panel = orjson.loads(client.get("/v1/board/panel", headers=auth).content)
    assert panel["banner"] is None and panel["freshness"]["by_source"]["precomputed"] == 1
    assert panel["wait"]["p95_ms"] is None and panel["wait"]["clients"] == 0
    beacon = {"timings": [{"input_to_shown_ms": 900, "network_ms": 20, "age": {"cache": 10}}]}
    assert client.post("/v1/beacon", json=beacon, headers=auth).status_code == 204
    panel = client.get("/v1/board/panel", headers=auth).json()
    # The two measures apart: the wait (front_jank is most of it) and the age (all cache). A
    # large share alone is no banner: nothing rose from a baseline (the rule: test_signals).
    assert panel["wait"]["shares"]["front_jank"] > 0.9 and panel["wait"]["clients"] == 1
    assert panel["wait"]["p95_ms"] > panel["wait"]["objective_ms"] == 500
    assert panel["age"]["shares"]["cache"] == 1.0 and panel["age"]["p95_ms"] <= 10
    assert panel["banner"] is None


def test_lineage_reader_follows_only_event_topics():
    from consumer_api.lineage import LineageReader
    from precast.settings import KafkaSettings

    reader = LineageReader(KafkaSettings(), {"p.heartbeats"}, "t")
    got = reader.read(
        [
            {"topic": "p.predictions", "partition": 0, "offset": 1},
            {"topic": "p.heartbeats", "partition": -1, "offset": 1},
            {"topic": "p.heartbeats", "partition": "0", "offset": 1},
        ]
        * 10
    )
    assert len(got) == 16  # at most MAX_REFS per call
    assert got[0]["missing"] == "not an event topic of this deployment"
    assert got[1]["missing"] == got[2]["missing"] == "malformed lineage entry"
