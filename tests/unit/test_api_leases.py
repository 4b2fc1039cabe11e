"""The read API over an in-memory view under validity leases: a quiet device's answer past its
own validity is served precomputed on the fast path, the batch GET and event streams, with the
extended valid_until in the body and in max-age; a conditional GET keeps matching (the answer is
the same); the board's rows carry what a board needs to extend them itself, and a lease reaches
a board as one event per partition."""

from __future__ import annotations

import asyncio

import orjson
from starlette.testclient import TestClient

from consumer_api.board.fleet_index import FleetIndex
from tests.api_fixtures import make_app, make_service, now_ms
from tests.serving_cases import HORIZON_MS, lease, leased


def _service_with_a_leased_answer():
    svc = make_service()
    now = now_ms()
    e = leased("dev-q", now - 60_000, now - 60_000, 3)  # computed a minute ago, horizon 5 s
    svc.view.put_if_newer("dev-q", e, now)
    return svc, e, now


def test_a_quiet_device_is_served_precomputed_under_its_lease_and_expired_without():
    svc, e, now = _service_with_a_leased_answer()
    client = TestClient(make_app(svc))
    r = client.get("/v1/devices/dev-q/prediction")
    assert r.json()["source"] == "stale"  # past its own validity: expired, asks
    x = lease(0, 3, now - 1_000, now - 900)
    svc.view.put_leases([x], now)
    r = client.get("/v1/devices/dev-q/prediction")  # the fast path
    doc = r.json()
    assert doc["source"] == "precomputed" and doc["computed_at_ms"] == e.computed_at_ms
    assert doc["valid_until_ms"] == now - 1_000 + HORIZON_MS
    assert doc["extended_by"]["offset"] == x.offset and doc["extended_by"]["generation"] == 3
    assert 1_000 <= doc["age_ms"] < 10_000  # since the certification, not a minute
    assert r.headers["cache-control"] in ("max-age=3", "max-age=2")
    assert (
        "age.queue;dur=0, age.model;dur=0, age.kafka;dur=1, age.cache" in r.headers["server-timing"]
    )
    assert doc["delay_origin"] == "cache"  # held valid by the lease, nothing waited
    again = client.get("/v1/devices/dev-q/prediction", headers={"if-none-match": r.headers["etag"]})
    assert again.status_code == 304 and again.headers["cache-control"].startswith("max-age=")
    batch = client.get("/v1/predictions", params={"ids": "dev-q"}).json()["predictions"][0]
    assert batch["source"] == "precomputed" and batch["valid_until_ms"] == doc["valid_until_ms"]
    # a lease of a fenced (older) generation arriving late changes nothing
    svc.view.put_leases([lease(0, 2, now, now)], now)
    assert (
        client.get("/v1/devices/dev-q/prediction").json()["valid_until_ms"]
        == (doc["valid_until_ms"])
    )


def test_board_rows_carry_lease_terms_and_a_lease_is_one_event():
    svc, e, now = _service_with_a_leased_answer()
    ix = FleetIndex(
        default_strategy="monitor_only", serve_stale=True, grace_ms=30_000, leases=svc.view.leases
    )
    ix.stored([("dev-q", e)])
    row = dict(zip(ix.layout.columns, ix.row("dev-q", now), strict=True))
    assert row["source"] == "stale"
    assert row["lease"] == [
        0,
        3,
        e.until_ms,
        e.valid_until_ms,
        None,
        "monitor_only",
        0.5,
        e.computed_at_ms,
    ]

    async def run():
        sub, _ = ix.subscribe(queue_max=10, last_seq=None)
        x = lease(0, 3, now - 1_000, now - 900)
        svc.view.put_leases([x], now)
        ix.leased([x])
        pending, overflow, _, leases = ix.take(sub)
        assert pending == set() and not overflow and leases == [x]  # no row per device
        r = dict(zip(ix.layout.columns, ix.row("dev-q", now), strict=True))
        assert r["source"] == "precomputed" and r["valid_until_ms"] == now - 1_000 + HORIZON_MS
        assert r["lease"][4] == now - 1_000  # its age is counted from the certification
        fresh = ix.freshness(now)
        assert fresh["by_source"]["precomputed"] == 1 and fresh["median_age_ms"] < 10_000

    asyncio.run(run())


def test_board_stream_sends_a_lease_event():
    from tests.api_fixtures import make_board

    svc, e, now = _service_with_a_leased_answer()
    board = make_board(svc, panel_s=3600, frame_s=0)
    board.index.leases = svc.view.leases
    board.index.stored([("dev-q", e)])
    app = make_app(svc, board)

    async def run() -> bytes:
        from consumer_api.board.routes import BoardEndpoints

        ep = BoardEndpoints(svc, board)
        gen = ep._events(None)
        got = b""
        got += await gen.__anext__()  # hello
        got += await gen.__anext__()  # panel
        x = lease(0, 3, now - 1_000, now - 900)
        svc.view.put_leases([x], now)
        board.index.leased([x])
        got += await asyncio.wait_for(gen.__anext__(), 5)
        await gen.aclose()
        return got

    assert app is not None
    out = asyncio.run(run())
    block = out.split(b"event: lease\n", 1)[1].split(b"\n\n", 1)[0]
    data = orjson.loads(block.removeprefix(b"data: "))
    assert data == {
        "leases": [
            {
                "partition": 0,
                "generation": 3,
                "certified_at_ms": now - 1_000,
                "valid_until_ms": now - 1_000 + HORIZON_MS,
            }
        ]
    }
