"""The API replica's edge purges and the edge's generated backends: what is kept when an edge
cannot be reached, when the first purge is sent, and what VCL the settings can produce."""

from __future__ import annotations

import pytest
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
    from consumer_api.read.answer import fresh
    from precast.serving import MemoryStore
    from tests.serving_cases import BASE_MS, HORIZON_MS, lease, leased

    store, now = MemoryStore(), BASE_MS + 6_000
    store.put_if_newer("d", leased("d", BASE_MS, BASE_MS + 40, 1, partition=2), BASE_MS)
    store.put_leases([lease(2, 1, BASE_MS + 4_000, BASE_MS + 4_300)], BASE_MS + 4_300)
    served = store.get("d", now)
    assert served.extension is not None  # extended by the lease until certified + horizon
    _, plain, _, max_age = fresh("d", served, now)
    assert dict(plain)[b"cache-control"] == b"max-age=%d" % max_age
    assert b"lp:" not in dict(plain)[b"surrogate-key"]
    _, shared, _, _ = fresh("d", served, now, edge_lease_s=30)
    h = dict(shared)
    assert h[b"cache-control"] == b"max-age=%d, s-maxage=30" % max_age
    assert h[b"surrogate-key"].endswith(b" lp:2")
    assert max_age * 1000 <= BASE_MS + 4_000 + HORIZON_MS - now  # browsers: its own validity
    # within twice the purge guard of the lease's end: a copy made now could miss the purge
    late = BASE_MS + 4_000 + HORIZON_MS - 900
    _, near_end, _, _ = fresh("d", store.get("d", late), late, edge_lease_s=30)
    assert b"s-maxage" not in dict(near_end)[b"cache-control"]
    # an answer no lease extends keeps its own validity, at the edge too
    store.put_if_newer("e", leased("e", now - 100, now - 50, 1, partition=3), now)
    _, own, _, _ = fresh("e", store.get("e", now), now, edge_lease_s=30)
    assert b"s-maxage" not in dict(own)[b"cache-control"]


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
    purger.watch_leases([healthy], BASE_MS + HORIZON_MS - 300)
    assert purger._pending == set()  # once per lease
    purger.watch_leases([lease(0, 2, BASE_MS + 1_000, BASE_MS + 1_010)], BASE_MS + 1_100)
    assert purger._pending == {"lp:0"}  # a new owner: its leases need not cover the old answers
