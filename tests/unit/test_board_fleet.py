"""The board's fleet index: rows, bounds (history, change log, pending per subscriber),
resumption and the board endpoints over an in-memory service, on the built-in fleet spec and on
a second spec of another shape (tests.integration.board_support.TRAILERS): columns, filters,
facets, alarm state and detail come from the spec."""

from __future__ import annotations

import asyncio
import collections
import random
import tomllib

import jsonschema_rs
import orjson
import pytest
from starlette.testclient import TestClient

from consumer_api.board.board_layout import BoardLayout
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.board.openapi_paths import document
from consumer_api.board.routes import Board
from precast.fleet import Fleet, load_fleet
from precast.fleet.snapshot import ForeignSnapshot, from_json
from schemas.spec.load import DEFAULT_SPEC, parse
from tests.api_fixtures import make_app, make_board, make_service, now_ms, prediction
from tests.integration.board_support import TRAILERS, context, snapshot

HOUR = 3_600_000
DAY = 24 * HOUR


def _index(fleet: Fleet | None = None, **kw) -> FleetIndex:
    layout = BoardLayout(fleet or load_fleet())
    return FleetIndex(
        default_strategy=layout.spec.serving.default_label,
        serve_stale=True,
        grace_ms=30_000,
        layout=layout,
        **kw,
    )


def _row(index: FleetIndex, d: str, now: int) -> dict:
    return dict(zip(index.layout.columns, index.row(d, now), strict=True))


def _set_context(index: FleetIndex, raw: bytes) -> None:
    ctx = from_json(index.layout.context, raw)
    index.set_context(ctx.device_id, index.layout.view(ctx))


@pytest.fixture(scope="module")
def trailers() -> Fleet:
    spec, problems = parse(tomllib.loads(TRAILERS.read_text()))
    assert spec is not None and problems == []
    return Fleet.of(spec)


# -- the built-in fleet: what the board showed before the spec, still there --------------------
def test_the_built_in_board_keeps_its_columns_filters_and_alarm_states():
    layout = BoardLayout(load_fleet())
    shown = [c.name for c in layout.display]
    assert shown == ["device_id", "strategy", "score", "source", "age_ms", "delay_origin",
                     "site", "device_type", "alarm", "open_work_orders"]  # fmt: skip
    assert layout.columns[:9] == ("device_id", "strategy", "score", "source", "computed_at_ms",
                                  "valid_until_ms", "delay_origin", "model_version", "trigger")  # fmt: skip
    assert layout.filters == ("site", "device_type", "strategy", "alarm", "source")
    assert layout.states == ("critical", "warning", "none")
    cfg = layout.config()
    assert [c["label"] for c in cfg["display"]][6:] == ["Site", "Device type", "Alarm",
                                                        "Open work orders"]  # fmt: skip
    assert [d["name"] for d in cfg["detail"]] == [
        "site", "device_type", "hw_model", "serial", "firmware"]  # fmt: skip


def test_rows_follow_source_expiry_and_context():
    ix, now = _index(), now_ms()
    ix.stored([("dev-1", prediction("dev-1", now - 100, horizon_ms=1_000))])
    ix.set_info("dev-2", {"site": "north", "device_type": "meter", "cpu_pct": 3.0}, 0.0)
    assert _row(ix, "dev-1", now)["source"] == "precomputed"
    assert _row(ix, "dev-1", now)["strategy"] == "remote_restart"
    assert _row(ix, "dev-1", now + 2_000)["source"] == "stale"  # past valid_until, in grace
    assert _row(ix, "dev-1", now + 60_000)["source"] == "fallback"  # past grace
    r2 = _row(ix, "dev-2", now)
    assert (r2["source"], r2["strategy"], r2["site"], r2["device_type"], r2["alarm"]) == (
        "fallback",
        "monitor_only",
        "north",
        "meter",
        "none",
    )
    _set_context(ix, context("dev-2", now, {"wo": "low"}, {"a": (now - 10, "warning")}))
    assert (_row(ix, "dev-2", now)["alarm"], _row(ix, "dev-2", now)["open_work_orders"]) == (
        "warning",
        1,
    )
    _set_context(ix, context("dev-2", now, {}, {"a": (now - 10, "major")}))
    assert _row(ix, "dev-2", now)["alarm"] == "critical"  # major counts with critical
    _set_context(ix, context("dev-2", now, {}, {"a": (now - 2 * HOUR, "critical")}))
    # outside the hour before the newest event; the work order closed with the new snapshot
    assert (_row(ix, "dev-2", now)["alarm"], _row(ix, "dev-2", now)["open_work_orders"]) == (
        "none",
        0,
    )


def test_alarm_state_sorts_by_rule_rank_and_filters():
    ix, now = _index(), now_ms()
    for d, sev in (("a", None), ("b", "warning"), ("c", "critical"), ("d", "warning")):
        ix.stored([(d, prediction(d, now))])
        if sev:
            _set_context(ix, context(d, now, {}, {f"al-{d}": (now, sev)}))
    _, rows = ix.query(now, sort="alarm")
    assert [r[0] for r in rows] == ["c", "b", "d", "a"]  # critical, warning, none
    total, rows = ix.query(now, filters={"alarm": "warning"})
    assert total == 2 and {r[0] for r in rows} == {"b", "d"}


def test_detail_lists_open_entities_and_window_entries_generically():
    ix, now = _index(), now_ms()
    ix.set_info(
        "dev-1", {"site": "s", "device_type": "camera", "serial": "SN1", "firmware": "6"}, 0
    )
    raw = context(
        "dev-1",
        now,
        {"wo-1": "high", "wo-2": "low"},
        {"al-1": (now - 60_000, "critical"), "al-2": (now - 1_000, "warning")},
    )
    _set_context(ix, raw)
    d = ix.detail("dev-1")
    assert d["fields"] == {"site": "s", "device_type": "camera", "hw_model": None,
                           "serial": "SN1", "firmware": "6"}  # fmt: skip
    ctx = d["context"]
    assert ctx["alarm"] == "critical" and ctx["as_of_ms"] == now
    assert ctx["values"]["open_work_orders"] == 2 and ctx["values"]["open_high_priority"] == 1
    assert ctx["values"]["hours_since_last_wo"] == 0.0
    (wos,) = ctx["open"]
    assert wos["label"] == "Work order" and wos["fields"] == ["priority"]
    assert wos["entities"] == [
        {"id": "wo-1", "values": {"priority": "high"},
         "counted_by": ["open_work_orders", "open_high_priority"]},
        {"id": "wo-2", "values": {"priority": "low"}, "counted_by": ["open_work_orders"]},
    ]  # fmt: skip
    (alarms,) = ctx["windows"]
    assert alarms["label"] == "Alarm" and alarms["key"] == "alarm_id"
    assert alarms["entries"] == [  # newest first, with the alert state its value raises
        {"id": "al-2", "event_time_ms": now - 1_000, "counted_by": ["alarms_warning_1h"],
         "alert": ["warning"]},
        {"id": "al-1", "event_time_ms": now - 60_000, "counted_by": ["alarms_critical_1h"],
         "alert": ["critical"]},
    ]  # fmt: skip
    ix.stored([("dev-9", prediction("dev-9", now))])
    assert ix.detail("dev-9")["context"] is None and ix.detail("nope") is None


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
        ix.set_info(d, {"site": "north" if i % 2 else "south", "device_type": "meter"}, 0.0)
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


def test_heartbeat_fields_are_read_again_after_the_refresh_interval_and_only_changes_count():
    ix = _index(info_refresh_s=60.0)
    assert ix.wants_info("dev-1", 100.0)
    ix.set_info("dev-1", {"site": "north", "device_type": "meter"}, 100.0)
    seq = ix.seq
    # due after 0.75-1.25 intervals (drawn per read, so that devices seen together spread)
    assert not ix.wants_info("dev-1", 144.9) and ix.wants_info("dev-1", 175.0)
    ix.set_info("dev-1", {"site": "north", "device_type": "meter"}, 160.0)
    assert ix.seq == seq  # the same values: no change for the boards
    ix.set_info("dev-1", {"site": "south", "device_type": "meter"}, 220.0)
    assert ix.seq == seq + 1 and _row(ix, "dev-1", now_ms())["site"] == "south"


def test_devices_first_seen_together_spread_their_refreshes():
    """10,000 devices first read within one second, each beating every 5 s: with a fixed
    interval all of them were due again in the same 5 s of every minute, and in those seconds
    the board feed validated every heartbeat."""
    ix = _index(info_refresh_s=60.0)
    ix._rng = random.Random(7)
    devices = [f"dev-{i}" for i in range(10_000)]
    info = {"site": "north", "device_type": "meter"}
    reads: collections.Counter[int] = collections.Counter()
    for t in range(0, 600, 5):  # ten minutes, a heartbeat per device every 5 s
        for i, d in enumerate(devices):
            mono = t + i / len(devices)  # spread over each 5 s round
            if ix.wants_info(d, mono):
                ix.set_info(d, info, mono)
                reads[int(mono // 5)] += 1
    late = [reads[r] for r in range(60, 120)]  # minutes 5-10, after a few refreshes
    assert max(late) < 0.2 * len(devices)  # fixed interval: 100 % in one round of each minute
    per_minute = sum(late) / 5  # 60 rounds of 5 s
    assert 0.85 * len(devices) <= per_minute <= 1.05 * len(devices)  # a read a device a minute


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


# -- snapshots the board must not misread ----------------------------------------------------------
def test_snapshots_of_another_spec_are_foreign_and_malformed_ones_raise(trailers):
    builtin = BoardLayout(load_fleet())
    theirs = snapshot(trailers, "tr-1", [])
    with pytest.raises(ForeignSnapshot):
        from_json(builtin.context, theirs)
    version_1 = orjson.dumps({"schema_version": 1, "device_id": "d", "open_work_orders": {},
                              "alarms": {}, "as_of_ms": 1})  # fmt: skip
    with pytest.raises(ForeignSnapshot):
        from_json(builtin.context, version_1)
    good = orjson.loads(context("d", now_ms(), {"wo": "high"}, {}))
    for bad in (
        b"not json",
        b"[]",
        orjson.dumps({**good, "open": []}),  # groups differ from the spec's
        orjson.dumps({**good, "windows": [{"a": [1]}]}),
        orjson.dumps({**good, "open": [{"wo": [["high"]]}]}),  # a list where a value is kept
    ):
        with pytest.raises((ValueError, LookupError, TypeError)):
            builtin.view(from_json(builtin.context, bad))


def test_a_spec_may_not_name_a_board_column_or_filter_like_the_board_itself():
    data = tomllib.loads(DEFAULT_SPEC.read_text())
    data["board"]["columns"] = [*data["board"]["columns"], "score"]
    data["board"]["filters"] = [*data["board"]["filters"], "limit"]
    _, problems = parse(data)
    assert [p.path for p in problems] == ["board.columns[3]", "board.filters[2]"]
    assert "uses itself" in problems[0].message


# -- a second spec: everything comes from it ---------------------------------------------------------
def test_a_second_spec_gets_its_own_columns_filters_facets_and_alarm(trailers):
    ix, now = _index(trailers), now_ms()
    layout = ix.layout
    assert [c.name for c in layout.display][6:] == [
        "depot", "box_temp_c", "door_open", "alarm", "days_since_visit", "last_visit_cost"]  # fmt: skip
    assert layout.columns[-1] == "trailer_model"  # a filter, not shown: in the row, at the end
    assert layout.filters == ("trailer_model", "depot", "strategy", "alarm", "source")
    assert layout.states == ("fault", "none") and layout.sortable >= {"box_temp_c", "age_ms"}
    display = {c["name"]: c for c in layout.config()["display"]}
    assert display["box_temp_c"]["unit"] == "degC" and display["door_open"]["type"] == "boolean"
    assert display["days_since_visit"]["unit"] == "d"
    assert display["last_visit_cost"]["unit"] == "EUR"
    for i, (model, depot) in enumerate((("R1", "kiel"), ("R2", "hamburg"), ("R2", "kiel"))):
        d = f"tr-{i}"
        ix.stored([(d, prediction(d, now))])
        ix.set_info(d, {"box_temp_c": 2.0 + i, "door_open": i == 1, "trailer_model": model,
                        "depot": depot, "axles": 2 + i}, 0.0)  # fmt: skip
    events = [
        ("visits", {"event_id": "v1", "event_time_ms": now - 3 * DAY, "cost_eur": 80.0}),
        ("visits", {"event_id": "v2", "event_time_ms": now - 2 * DAY, "cost_eur": 125.5}),
        ("faults", {"event_id": "f1", "event_time_ms": now - HOUR, "fault_id": "F1",
                    "level": "severe"}),
        ("faults", {"event_id": "f3", "event_time_ms": now, "fault_id": "F2", "level": "minor"}),
    ]  # fmt: skip
    _set_context(ix, snapshot(trailers, "tr-1", events, now))
    old = [("faults", {"event_id": "f0", "event_time_ms": now - 8 * HOUR, "fault_id": "F0",
                       "level": "severe"})]  # fmt: skip
    _set_context(ix, snapshot(trailers, "tr-2", old, now))  # outside the 6 h window as of now
    r = _row(ix, "tr-1", now)
    assert (r["depot"], r["box_temp_c"], r["door_open"], r["trailer_model"]) == (
        "hamburg", 3.0, True, "R2")  # fmt: skip
    assert (r["alarm"], r["days_since_visit"], r["last_visit_cost"]) == ("fault", 2.0, 125.5)
    r0 = _row(ix, "tr-0", now)  # no context: the values of a device nobody reported on
    assert (r0["alarm"], r0["days_since_visit"], r0["last_visit_cost"]) == ("none", 365.0, 0.0)
    assert ix.facets() == {
        "trailer_model": ["R1", "R2"],
        "depot": ["hamburg", "kiel"],
        "strategy": ["keep_running", "remote_restart"],
        "alarm": ["fault", "none"],
        "source": ["precomputed", "stale", "fallback"],
    }
    total, rows = ix.query(now, filters={"trailer_model": "R2", "depot": "kiel"})
    assert total == 1 and rows[0][0] == "tr-2"
    _, rows = ix.query(now, sort="days_since_visit", descending=True)
    assert [x[0] for x in rows][-1] == "tr-1"  # the others never had a visit: the cap
    _, rows = ix.query(now, sort="alarm")
    assert rows[0][0] == "tr-1"
    d = ix.detail("tr-1")
    assert d["fields"] == {"depot": "hamburg", "box_temp_c": 3.0, "door_open": True,
                           "axles": 3, "trailer_model": "R2"}  # fmt: skip
    (faults,) = d["context"]["windows"]
    assert faults["label"] == "Fault" and d["context"]["open"] == []
    # the minor fault passes no filter: not kept
    assert [(e["id"], e["counted_by"], e["alert"]) for e in faults["entries"]] == [
        ("F1", ["severe_faults_6h"], ["fault"])
    ]
    # kept (pruned only when a newer fault arrives) but counted by nothing as of now
    (faults,) = ix.detail("tr-2")["context"]["windows"]
    assert faults["entries"] == [
        {"id": "F0", "event_time_ms": now - 8 * HOUR, "counted_by": [], "alert": []}
    ]
    assert _row(ix, "tr-2", now)["alarm"] == "none"


def test_the_openapi_document_declares_the_rows_of_the_spec(trailers):
    ix, now = _index(trailers), now_ms()
    ix.stored([("tr-1", prediction("tr-1", now))])
    ix.set_info("tr-2", {"box_temp_c": 1.5, "depot": "kiel", "trailer_model": "R1"}, 0.0)
    _set_context(ix, snapshot(trailers, "tr-2", [], now))
    paths, schemas = document(ix.layout, 50_000)
    params = [p["name"] for p in paths["/v1/board/fleet"]["get"]["parameters"]]
    assert params[:5] == ["trailer_model", "depot", "strategy", "alarm", "source"]
    total, rows = ix.query(now)
    body = {"seq": ix.seq, "now_ms": now, "total": total, "offset": 0,
            "columns": list(ix.layout.columns), "rows": rows, "facets": ix.facets(),
            "layout": ix.layout.config()}  # fmt: skip
    declared = schemas["Fleet"]["properties"]["rows"]["items"]
    fleet = jsonschema_rs.Draft202012Validator(schemas["Fleet"])
    fleet.validate(orjson.loads(orjson.dumps(body)))
    # each item as the document names it (a tuple schema built from its annotation)
    items = declared["x-row-items"]
    assert [i["name"] for i in items] == list(ix.layout.columns)
    row = jsonschema_rs.Draft202012Validator(
        {"type": "array", "prefixItems": [i["schema"] for i in items], "items": False}
    )
    for r in orjson.loads(orjson.dumps(rows)):
        row.validate(r)
    rows[0][ix.layout.index["door_open"]] = "yes"  # not what the document says
    assert not row.is_valid(orjson.loads(orjson.dumps(rows[0])))
    assert not fleet.is_valid(orjson.loads(orjson.dumps({**body, "rows": [rows[0][:-1]]})))
    # the built-in fleet's document declares its own columns, not the trailers'
    _, builtin = document(BoardLayout(load_fleet()), 10)
    names = builtin["Fleet"]["properties"]["columns"]["items"]["enum"]
    assert "site" in names and "depot" not in names


# -- the endpoints -----------------------------------------------------------------------------------
def test_board_page_is_served_with_a_strict_content_security_policy():
    svc = make_service()
    client = TestClient(make_app(svc))
    page = client.get("/board/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert b'src="board.js"' in page.content and b"http" not in page.content.split(b"<body>")[0]
    assert client.get("/board/board.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/board/layout.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/board", follow_redirects=False).headers["location"] == "/board/"


def test_board_endpoints_over_an_in_memory_service():
    svc = make_service(auth_token="pct_board-unit-test-token-0123")
    board = make_board(svc, panel_s=0)
    client = TestClient(make_app(svc, board))
    auth = {"Authorization": "Bearer pct_board-unit-test-token-0123"}
    now = now_ms()
    board.index.stored([("dev-1", prediction("dev-1", now - 50))])
    assert client.get("/board/").status_code == 200  # the page holds no data: no token
    assert client.get("/v1/board/fleet").status_code == 401
    doc = client.get("/v1/board/fleet", headers=auth).json()
    assert (
        doc["total"] == 1 and doc["seq"] == 1 and doc["columns"] == list(board.index.layout.columns)
    )
    assert (
        doc["layout"]["columns"] == doc["columns"] and doc["layout"]["fleet"]["name"] == "devices"
    )
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


def test_the_fleet_query_takes_the_filters_of_its_spec(trailers):
    svc = make_service(default_strategy="keep_running")
    ix = _index(trailers)
    client = TestClient(make_app(svc, Board(ix)))
    ix.set_info("tr-1", {"trailer_model": "R1", "depot": "kiel"}, 0.0)
    ix.set_info("tr-2", {"trailer_model": "R2", "depot": "kiel"}, 0.0)
    got = client.get("/v1/board/fleet", params={"trailer_model": "R2", "sort": "box_temp_c"})
    assert [r[0] for r in got.json()["rows"]] == ["tr-2"]
    for params, name in (({"site": "x"}, "site"), ({"alarm": "critical"}, "alarm"),
                         ({"sort": "open_work_orders"}, "sort")):  # fmt: skip
        bad = client.get("/v1/board/fleet", params=params)
        assert bad.status_code == 400 and bad.json()["parameter"] == name, bad.json()
    assert client.get("/v1/board/fleet", params={"alarm": "fault"}).json()["total"] == 0
    detail = client.get("/v1/board/devices/tr-1").json()
    assert detail["fields"]["depot"] == "kiel" and detail["context"] is None


def test_lineage_reader_follows_only_event_topics():
    from consumer_api.board.lineage import LineageReader
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


@pytest.mark.parametrize("url", ["", "http://127.0.0.1:16686/trace/"])
def test_the_layout_names_where_a_trace_opens(url):
    svc = make_service()
    client = TestClient(make_app(svc, make_board(svc, panel_s=0, trace_url=url)))
    assert client.get("/v1/board/fleet").json()["layout"]["trace_url"] == url


@pytest.mark.parametrize("bad", ["javascript:alert(1)//", "data:text/html,x", "ftp://x/"])
def test_a_trace_ui_url_that_is_not_http_is_refused(bad):
    from pydantic import ValidationError

    from precast.settings import TracingSettings

    with pytest.raises(ValidationError, match="http"):
        TracingSettings(ui_url=bad)
