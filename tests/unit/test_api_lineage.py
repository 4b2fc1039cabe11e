"""The board's lineage endpoint reads a stored answer's `lineage` as untrusted: whatever a
writer to the predictions topic put there is a 200 whose items say what could not be used,
never a 500; and lineage reads are bounded per client and per replica (503 + Retry-After)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from consumer_api.board.board_layout import AGE
from consumer_api.board.lineage import MAX_REFS, LineageReader, check_refs
from consumer_api.edge.admission import Admission, Busy
from precast.serving import entry_from_prediction
from precast.settings import KafkaSettings
from tests.api_fixtures import make_app, make_board, make_service, now_ms

TOPIC = "p.heartbeats"


class FakeReader(LineageReader):
    """Kafka replaced by a fill-in: each wanted ref gets an event (or waits on `gate`)."""

    def __init__(self, gate: threading.Event | None = None, **kw: Any) -> None:
        super().__init__(KafkaSettings(), {TOPIC}, "t", **kw)
        self.gate, self.fetched, self.records = gate, [], []

    def _fetch_within(self, wanted, timeout_s):
        if self.gate is not None:
            self.gate.wait(10)
        for (t, p, o), item in wanted.items():
            self.fetched.append((t, p, o))
            item["event"] = self.records.pop() if self.records else {"device_id": "d", "offset": o}


def _body(lineage: Any) -> bytes:
    t = now_ms()
    doc = {"schema_version": 1, "device_id": "dev-1",
           "candidates": [{"strategy": "remote_restart", "score": 0.7}],
           "model_version": "1.0.0", "computed_at_ms": t, "valid_until_ms": t + 60_000,
           "produced_at_ms": t, "trigger": "heartbeat", "lineage": lineage}  # fmt: skip
    return json.dumps(doc).encode()  # a raw writer's bytes: integers of any size too


def _client(reader: LineageReader, lineage: Any) -> TestClient:
    svc = make_service()
    board = make_board(svc, lineage=reader)
    body = _body(lineage)
    board.index.stored([("dev-1", entry_from_prediction(body, now_ms()))])
    return TestClient(make_app(svc, board))


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=300)
)
hostile = st.recursive(
    json_scalars | st.sampled_from([TOPIC, 0, 2**31 - 1, 2**31, 2**63, -1]),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)
refs = st.fixed_dictionaries(
    {"topic": hostile | st.just(TOPIC), "partition": hostile, "offset": hostile}
)
lineages = hostile | st.lists(refs | hostile, max_size=20)


_READER = FakeReader()
_SVC = make_service()
# the records are read through the fleet spec's validator too (their topic's role)
_BOARD = make_board(_SVC, lineage=_READER, event_roles={TOPIC: "heartbeats"})
_CLIENT = TestClient(make_app(_SVC, _BOARD))
# what a record of an event topic may hold once it parsed as JSON
records = hostile | st.fixed_dictionaries(
    {"device_id": st.just("dev-1") | hostile, "event_id": hostile, "event_time_ms": hostile},
    optional={"schema_version": hostile, "temperature_c": hostile},
)


@given(lineages, st.lists(records, max_size=4))
def test_any_stored_lineage_is_a_200_with_reasons(lineage, events):
    _READER.fetched.clear()
    _READER.records[:] = events
    _BOARD.index.stored([("dev-1", entry_from_prediction(_body(lineage), now_ms()))])
    r = _CLIENT.get("/v1/board/devices/dev-1/events")
    assert r.status_code == 200, r.text
    items = r.json()["events"]
    assert len(items) <= MAX_REFS
    for item in items:
        assert ("event" in item) != ("missing" in item), item
        assert len(orjson.dumps({k: item[k] for k in ("topic", "partition", "offset")})) < 1000
    for t, p, o in _READER.fetched:  # only what Kafka can be asked for is ever asked
        assert t == TOPIC and 0 <= p < 2**31 and 0 <= o < 2**63


def test_each_unusable_shape_named_by_the_issue_says_why():
    ok = {"topic": TOPIC, "partition": 0, "offset": 5}
    for lineage, why in (
        ("abc", "lineage is a str, not a list"),
        ({"topic": TOPIC}, "lineage is a dict, not a list"),
        (7, "lineage is a int, not a list"),
        ([ok, 3], "lineage entry is a int, not an object"),
        ([{"topic": [TOPIC], "partition": 0, "offset": 1}], "not an event topic"),
        ([{"topic": TOPIC, "partition": 2**31, "offset": 1}], "malformed lineage entry"),
        ([{"topic": TOPIC, "partition": 0, "offset": 2**63}], "malformed lineage entry"),
        ([{"topic": TOPIC, "partition": True, "offset": 1}], "malformed lineage entry"),
    ):
        items, _ = check_refs(lineage, {TOPIC})
        assert any(why in i.get("missing", "") for i in items), (lineage, items)
    r = _client(FakeReader(), [ok, "x"]).get("/v1/board/devices/dev-1/events").json()
    assert r["events"][0]["event"] == {"device_id": "d", "offset": 5}
    assert "not an object" in r["events"][1]["missing"]


def test_a_body_that_is_not_an_object_reads_as_no_lineage():
    from consumer_api.board.lineage import lineage_of

    assert lineage_of(b"[1,2]") == [] and lineage_of(b"nope") == []
    assert lineage_of(b'{"lineage":"x"}') == "x"


def test_lineage_reads_beyond_the_bound_get_503_and_never_queue():
    gate = threading.Event()
    reader = FakeReader(gate, per_client=1, max_reads=2)
    wanted = [{"topic": TOPIC, "partition": 0, "offset": 1}]

    async def scenario():
        keys_a, keys_b, keys_c = ["t:a"], ["t:b"], ["t:c"]
        first = asyncio.ensure_future(reader.events(keys_a, _body(wanted)))
        await asyncio.sleep(0)
        # the same client again: refused at once, not queued behind its first read
        try:
            await reader.events(keys_a, _body(wanted))
            raise AssertionError("admitted")
        except Busy as exc:
            assert exc.bound == "client"
            r = exc.response()
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
        second = asyncio.ensure_future(reader.events(keys_b, _body(wanted)))
        await asyncio.sleep(0)
        try:  # a third client: the replica's bound
            await reader.events(keys_c, _body(wanted))
            raise AssertionError("admitted")
        except Busy as exc:
            assert exc.bound == "replica"
        gate.set()
        assert (await first)[0]["event"] and (await second)[0]["event"]
        for _ in range(100):  # slots come back when the threads are done
            if reader.admission.running == 0:
                break
            await asyncio.sleep(0.01)
        assert reader.admission.running == 0
        assert (await reader.events(keys_c, _body(wanted)))[0]["event"]

    asyncio.run(scenario())


def test_a_lineage_without_usable_refs_takes_no_slot():
    reader = FakeReader(per_client=1, max_reads=1)
    reader.admission.enter(["t:x"])  # the only slot is taken
    got = asyncio.run(reader.events(["t:x"], _body("not a list")))
    assert "not a list" in got[0]["missing"]


def test_admission_counts_come_back_per_key():
    a = Admission("k", per_client=2, total=3)
    a.enter(["x"])
    a.enter(["x"])
    try:
        a.enter(["x", "y"])
        raise AssertionError("admitted")
    except Busy:
        pass
    assert a.running == 2  # a refusal counts nothing
    a.leave(["x"])
    a.enter(["x", "y"])
    assert a.running == 2


def test_fleet_queries_past_their_bound_get_503_with_retry_after():
    svc = make_service()
    board = make_board(svc)
    client = TestClient(make_app(svc, board))
    q = board.index.queries
    assert client.get("/v1/board/fleet").status_code == 200
    q.enter(["a:testclient"])  # this client's one query in flight
    r = client.get("/v1/board/fleet")
    assert r.status_code == 503 and r.json()["error"] == "busy" and r.headers["retry-after"]
    q.leave(["a:testclient"])
    for k in range(q.total):  # other clients fill the replica's bound
        q.enter([f"a:other-{k}"])
    r = client.get("/v1/board/fleet")
    assert r.status_code == 503 and "replica" in r.json()["detail"]
    q.leave(["a:other-0"])
    assert client.get("/v1/board/fleet").status_code == 200


def test_a_fleet_page_is_the_same_as_a_full_sort_would_give():
    svc = make_service()
    board = make_board(svc)
    t = now_ms()
    board.index.stored(
        [(f"d-{i:03d}", entry_from_prediction(_body([]).replace(b"dev-1", f"d-{i:03d}".encode())
                                              .replace(str(t).encode(), str(t - i * 7 % 13).encode()), t))
         for i in range(60)]
    )  # fmt: skip
    for sort in ("device_id", AGE, "computed_at_ms", "score"):
        for desc in (False, True):
            total, full = board.index.query(t, sort=sort, descending=desc, limit=1000)
            _, page = board.index.query(t, sort=sort, descending=desc, offset=10, limit=15)
            assert total == 60 and page == full[10:25]
