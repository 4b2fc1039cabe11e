"""The API replica's edge purges and the edge's generated backends: what is kept when an edge
cannot be reached, when the first purge is sent, and what VCL the settings can produce."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from opsctl.settings import StackSettings
from opsctl.stack.varnish_node import backends_vcl
from precast.edge_cache import purge as edge_purge
from precast.edge_cache.keys import ALL
from precast.edge_cache.purge import EdgePurge, NewestPurger
from precast.settings import EdgeSettings

UNREACHABLE = EdgeSettings(purge_urls=["http://127.0.0.1:1"], purge_timeout_s=0.5)


def test_an_unreachable_edge_keeps_every_key_for_the_next_round():
    purger = NewestPurger(EdgePurge(UNREACHABLE, "test"), 100, purge_all_when_ready=False)
    purger.note([("dev-1", None), ("dev-2", None)])
    report = purger.run_once()
    assert report is not None and not report.ok
    assert "ConnectionRefusedError" in (report.nodes[0].error or "")
    assert purger._pending == {"d:dev-1", "d:dev-2"}
    purger.note([("dev-2", None), ("dev-3", None)])  # deduplicated
    assert purger._pending == {"d:dev-1", "d:dev-2", "d:dev-3"}


def test_too_many_pending_keys_collapse_into_purging_everything(monkeypatch):
    monkeypatch.setattr(edge_purge, "MAX_PENDING", 5)
    purger = NewestPurger(EdgePurge(UNREACHABLE, "test"), 100, purge_all_when_ready=False)
    purger.note([(f"dev-{i}", None) for i in range(6)])
    assert purger._pending == {ALL}
    purger.run_once()  # fails: everything stays pending
    assert purger._pending == {ALL}


def test_nothing_is_sent_before_the_replica_is_ready_and_everything_once_after():
    ready = False
    purger = NewestPurger(EdgePurge(UNREACHABLE, "test"), 100, lambda: ready)
    purger.note([("dev-1", None)])
    assert purger.run_once() is None and purger._pending == {"d:dev-1"}
    ready = True
    report = purger.run_once()
    assert report is not None  # tried: everything, since copies may predate the load
    assert purger._pending == {ALL}


def test_backends_vcl_names_each_replica_with_a_readiness_probe():
    text = backends_vcl(["127.0.0.1:8000", "[::1]:8001"], ["127.0.0.1"])
    assert 'backend api0 {\n    .host = "127.0.0.1";\n    .port = "8000";' in text
    assert '.host = "::1";' in text and '.port = "8001";' in text
    assert text.count(".probe = api_ready;") == 2 and '.url = "/readyz";' in text
    assert "origin.add_backend(api1);" in text and '"127.0.0.1";' in text


@pytest.mark.parametrize(
    "backend",
    ['127.0.0.1:8000"; }', "host:0", "host", "evil\nhost:80", "a b:80", "127.0.0.1:70000"],
)
def test_backends_that_are_not_host_port_are_refused(backend):
    # They are written into VCL: anything else could inject configuration.
    with pytest.raises(ValidationError, match="host:port"):
        StackSettings(edge_backends=[backend])


@pytest.mark.parametrize("url", ["ftp://edge", "127.0.0.1:6091", "http://"])
def test_purge_urls_are_http(url):
    with pytest.raises(ValidationError, match="http"):
        EdgeSettings(purge_urls=[url])


def test_purge_urls_from_a_comma_separated_string():
    s = EdgeSettings(purge_urls="http://a:1/, http://b:2")  # type: ignore[arg-type]
    assert s.purge_urls == ["http://a:1", "http://b:2"]


def test_a_leased_answer_may_stay_at_the_edge_only_with_a_lease_watch():
    from consumer_api.read.answer import EdgeLeases, fresh
    from precast.serving import MemoryStore
    from tests.serving_cases import BASE_MS, HORIZON_MS, lease, leased

    store, now = MemoryStore(), BASE_MS + 6_000
    edge = EdgeLeases(30, 500, store.leases.get)  # guard 250 ms: no s-maxage within 500 ms
    store.put_if_newer("d", leased("d", BASE_MS, BASE_MS + 40, 1, partition=2), BASE_MS)
    store.put_leases([lease(2, 1, BASE_MS + 4_000, BASE_MS + 4_300)], BASE_MS + 4_300)
    lease_end = BASE_MS + 4_000 + HORIZON_MS
    served = store.get("d", now)
    assert served.extension is not None  # extended by the lease until certified + horizon
    _, plain, _, max_age = fresh("d", served, now)
    assert dict(plain)[b"cache-control"] == b"max-age=%d" % max_age
    assert b"lp:" not in dict(plain)[b"surrogate-key"]
    _, shared, _, _ = fresh("d", served, now, edge=edge)
    h = dict(shared)
    assert h[b"cache-control"] == b"max-age=%d, s-maxage=30" % max_age
    assert h[b"surrogate-key"].endswith(b" lp:2")
    assert max_age * 1000 <= lease_end - now  # browsers: its own validity
    # within twice the purge guard of the lease's end: a copy made now could miss the purge
    late = lease_end - 400
    _, near_end, _, _ = fresh("d", store.get("d", late), late, edge=edge)
    assert b"s-maxage" not in dict(near_end)[b"cache-control"]
    _, before, _, _ = fresh("d", store.get("d", late - 200), late - 200, edge=edge)
    assert b"s-maxage=30" in dict(before)[b"cache-control"]

    def edge_header(device: str, e, at: int) -> bytes:
        store.put_if_newer(device, e, at)
        return dict(fresh(device, store.get(device, at), at, edge=edge)[1])[b"cache-control"]

    # a new answer the lease does not extend yet (its own validity is longer): the lease chain
    # extends it in time, or lapses and its purge drops the copy
    fresh_one = leased("f", now - 100, now - 50, 1, partition=2)
    assert b"s-maxage=30" in edge_header("f", fresh_one, now)
    # no lease watched for its partition, a newer generation than the lease's, no terms:
    # nothing would purge a longer copy, so the edge keeps its own validity
    assert b"s-maxage" not in edge_header(
        "e", leased("e", now - 100, now - 50, 1, partition=3), now
    )
    assert b"s-maxage" not in edge_header(
        "g", leased("g", now - 100, now - 50, 2, partition=2), now
    )
    assert b"s-maxage" not in edge_header(
        "h", leased("h", now - 100, now - 50, None, partition=2), now
    )


def test_a_lapsing_or_reowned_partition_purges_its_leased_copies():
    from tests.serving_cases import BASE_MS, HORIZON_MS, lease

    purger = NewestPurger(
        EdgePurge(UNREACHABLE, "test"), 100, purge_all_when_ready=False, lease_guard_ms=500
    )
    healthy = lease(0, 1, BASE_MS, BASE_MS + 10)
    purger.watch_leases([healthy], BASE_MS + 1_000)
    assert purger._pending == set()  # 4 s left: nothing to do
    purger.watch_leases([healthy], BASE_MS + HORIZON_MS - 400)  # within the guard, no newer
    assert purger._pending == {"lp:0"}
    purger._pending.clear()
    # again each round until a second past its end: a copy whose fetch began before the
    # guard and reached the edge after the first purge goes with the next one
    for late in (-300, 0, 900):
        purger.watch_leases([healthy], BASE_MS + HORIZON_MS + late)
        assert purger._pending == {"lp:0"}, late
        purger._pending.clear()
    purger.watch_leases([healthy], BASE_MS + HORIZON_MS + 1_000)
    assert purger._pending == set()  # long lapsed: its answers are expired at the replica too
    lapses = REGISTRY.get_sample_value("precast_edge_lease_purges_total", {"reason": "lapsing"})
    assert lapses is not None and lapses >= 1
    purger.watch_leases([lease(0, 2, BASE_MS + 1_000, BASE_MS + 1_010)], BASE_MS + 1_100)
    assert purger._pending == {"lp:0"}  # a new owner: its leases need not cover the old answers


def test_newer_answers_are_soft_purged_and_lapsing_leases_hard_first():
    """A newer answer's copy may be served once more within its grace while the edge fetches
    the newer one (soft); a lapsing lease's copies must not be served at all (hard, first)."""
    import http.server
    import threading
    import types

    from tests.serving_cases import BASE_MS, HORIZON_MS, lease

    got: list[tuple[str, str]] = []

    class Edge(http.server.BaseHTTPRequestHandler):
        def do_PURGE(self) -> None:  # noqa: N802 (the method's name is the HTTP verb)
            for h in ("xkey-purge", "xkey-softpurge"):
                if self.headers.get(h):
                    got.append((h, self.headers[h]))
            body = b"purged 1\n"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Edge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        edge = EdgeSettings(purge_urls=[f"http://127.0.0.1:{server.server_port}"])
        purger = NewestPurger(
            EdgePurge(edge, "test"),
            100,
            purge_all_when_ready=False,
            leases=lambda: [lease(4, 1, BASE_MS, BASE_MS + 10)],
            lease_guard_ms=250,
        )
        purger.note([("dev-2", None), ("dev-1", None)])
        purger.watch_leases([lease(4, 1, BASE_MS, BASE_MS + 10)], BASE_MS + HORIZON_MS - 100)
        with purger._lock:
            keys = set(purger._pending)
        assert keys == {"d:dev-1", "d:dev-2", "lp:4"}
        purger._leases = None  # the round below sends what is pending, nothing more
        report = purger.run_once()
        assert report is not None and report.ok and report.purged == 2
        assert got == [("xkey-purge", "lp:4"), ("xkey-softpurge", "d:dev-1 d:dev-2")]
        got.clear()
        # a purge marker's device goes hard: a purged answer is never served once more
        marker = types.SimpleNamespace(purge=True)
        purger.note([("dev-5", marker), ("dev-4", None)])
        purger.run_once()
        assert got == [("xkey-purge", "d:dev-5"), ("xkey-softpurge", "d:dev-4")]
        got.clear()
        purger.note_all()
        purger.note([("dev-3", None)])
        purger.run_once()
        assert got == [("xkey-purge", "precast")]  # everything, hard, covers the device too
        purger.edge.close()
    finally:
        server.shutdown()
        server.server_close()


def test_the_purger_wakes_when_a_lease_enters_its_guard_not_an_interval_later():
    import time

    from tests.serving_cases import HORIZON_MS, lease

    purger = NewestPurger(EdgePurge(UNREACHABLE, "test"), 5_000, lease_guard_ms=200)
    assert purger._wait_s() == 5.0  # no lease watched: the interval
    now = int(time.time() * 1000)
    certified = now - HORIZON_MS + 1_000  # the lease ends in 1 s: its guard begins in 0.8 s
    purger.watch_leases([lease(1, 1, certified, certified + 5)], now)
    assert 0.7 <= purger._wait_s() <= 0.8
    purger.watch_leases([lease(1, 1, certified, certified + 5)], now + 900)  # within it
    assert purger._pending == {"lp:1"} and purger._wait_s() == 5.0
