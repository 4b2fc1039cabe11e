"""Per-client limits, the stream reservation, bounded beacons, error hygiene, the local
precompute budget and the idle-socket check, without a server process."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time

import pytest
from starlette.requests import ClientDisconnect, Request
from starlette.testclient import TestClient

from consumer_api.beacons.beacon import Beacon, clip, split
from consumer_api.edge.client_limits import Buckets, ClientLimits, retry_after
from consumer_api.edge.error_hygiene import ErrorHygiene
from consumer_api.read.hub import Hub
from consumer_api.settings import ApiOptions
from consumer_api.speculation.precompute_budget import LocalBudget
from precast.http.reaper import silent_for_ms, sweep
from precast.http.serve import raise_open_files
from tests.api_fixtures import make_app, make_service, now_ms, prediction


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_bucket_takes_from_every_key_or_none_and_says_how_long_to_wait():
    clock = Clock()
    b = Buckets(rate=10, burst=20, max_keys=100, clock=clock)
    assert b.take(["t:x", "a:1"], 15) == 0.0
    assert b.take(["t:x", "a:2"], 10) == pytest.approx(0.5)  # t:x has 5, needs 10: 0.5 s
    assert b.take(["a:2"], 10) == 0.0  # the refused take took nothing from a:2
    clock.t = 0.5
    assert b.take(["t:x"], 10) == 0.0
    assert b.take(["t:y"], 1_000) == 0.0  # larger than the burst: the whole burst, once
    assert b.take(["t:y"], 1) > 0


def test_bucket_table_is_bounded():
    b = Buckets(rate=1, burst=1, max_keys=100, clock=Clock())
    for i in range(1_000):
        b.take([f"a:{i}"], 1)
    assert len(b._b) == 100


def test_client_keys_follow_the_setting():
    def keys(how: str, auth: str | None) -> list[str]:
        limits = ClientLimits(ApiOptions(client_key=how))
        headers = [(b"authorization", auth.encode())] if auth else []
        scope = {"type": "http", "headers": headers, "client": ("10.0.0.7", 5000)}
        return limits.keys(Request(scope))

    both = keys("token_and_address", "Bearer abc")
    assert both[0].startswith("t:") and both[1] == "a:10.0.0.7" and "abc" not in both[0]
    assert keys("token", "Bearer abc") == both[:1]
    assert keys("address", "Bearer abc") == ["a:10.0.0.7"]
    assert keys("token_and_address", None) == ["a:10.0.0.7"]


def _keys_via(limits: ClientLimits):
    """keys(peer, X-Forwarded-For) of a request from `peer`."""

    def key(peer: str, xff: str) -> list[str]:
        scope = {
            "type": "http",
            "headers": [(b"x-forwarded-for", xff.encode())],
            "client": (peer, 1),
        }
        return limits.keys(Request(scope))

    return key


def test_forwarded_for_counts_only_from_a_trusted_proxy():
    key = _keys_via(ClientLimits(ApiOptions(trusted_proxies=["10.0.0.1"])))

    assert key("10.0.0.1", "1.2.3.4, 192.168.0.9") == ["a:192.168.0.9"]
    assert key("10.0.0.2", "192.168.0.9") == ["a:10.0.0.2"]  # anyone else: the header is a claim


def test_behind_two_trusted_hops_the_client_is_the_first_untrusted_from_the_right():
    # compose: client -> TLS proxy -> edge cache -> API, both proxies in the front network
    key = _keys_via(ClientLimits(ApiOptions(trusted_proxies=["172.30.52.0/27"])))
    edge, proxy = "172.30.52.3", "172.30.52.2"
    assert key(edge, f"198.51.100.7, {proxy}") == ["a:198.51.100.7"]
    assert key(edge, f"6.6.6.6, 198.51.100.7, {proxy}") == ["a:198.51.100.7"]  # a claim, left
    assert key(edge, proxy) == [f"a:{proxy}"]  # only proxies: the outermost one
    assert key(edge, "") == [f"a:{edge}"]


def test_stream_slots_per_client_and_per_replica():
    limits = ClientLimits(ApiOptions(client_max_streams=2))
    assert limits.open_stream(["a:1"]) == 0 and limits.open_stream(["a:1"]) == 0
    assert limits.open_stream(["a:1"]) > 0
    limits.close_stream(["a:1"])
    assert limits.open_stream(["a:1"]) == 0
    hub = Hub(max_streams=3)
    assert [hub.reserve() for _ in range(5)] == [True, True, True, False, False]
    hub.release()
    assert hub.reserve() and hub.streams == 3


def test_retry_after_is_whole_seconds_at_least_one():
    assert retry_after(0.01) == "1" and retry_after(2.2) == "3"


def test_event_stream_slots_come_back_when_a_stream_ends():
    svc = make_service(sse_max_streams=2, sse_keepalive_s=0.05)
    with TestClient(make_app(svc)) as client:
        for _ in range(3):  # open and end streams more times than there are slots
            with client.stream("GET", "/v1/stream?ids=dev-1") as r:
                assert r.status_code == 200
                next(r.iter_lines())
        assert svc.hub.streams == 0


def test_prefetch_and_beacon_rates_answer_429_with_retry_after():
    svc = make_service(client_prefetch_per_s=1, client_prefetch_burst=150, client_beacon_burst=2)
    client = TestClient(make_app(svc))
    ids = [f"d-{i}" for i in range(100)]
    assert client.post("/v1/prefetch", json={"device_ids": ids}).status_code == 202
    r = client.post("/v1/prefetch", json={"device_ids": ids})
    assert r.status_code == 429 and r.json()["error"] == "rate_limited"
    assert int(r.headers["retry-after"]) >= 1
    beacon = {"timings": [{"input_to_shown_ms": 100, "network_ms": 10}]}
    assert [client.post("/v1/beacon", json=beacon).status_code for _ in range(3)] == [
        204,
        204,
        429,
    ]


def test_beacon_values_are_clipped():
    t = Beacon.model_validate(
        {"timings": [{"input_to_shown_ms": 5_000, "network_ms": 10, "age": {"kafka": 3_600_000}}]}
    ).timings[0]
    wait, age = split(t)
    assert age is not None
    c, n = clip(age, 1_000)
    assert n == 1 and c["kafka"] == 1_000 and c["cache"] == 0
    c, n = clip(wait, 1_000)
    assert n == 1 and c["front_jank"] == 1_000 and c["network_qoe"] == 10
    assert clip(c, 1_000) == (c, 0)


def test_errors_are_json_and_one_line(caplog):
    async def boom(scope, receive, send):
        raise RuntimeError("bug")

    async def gone(scope, receive, send):
        raise ClientDisconnect()

    caplog.set_level(logging.INFO, logger="precast.api")
    r = TestClient(ErrorHygiene(boom)).get("/x")
    assert r.status_code == 500 and r.json()["error"] == "internal_error"
    caplog.clear()
    r = TestClient(ErrorHygiene(gone)).post("/x", content=b"{")
    assert r.status_code == 400 and r.json()["error"] == "bad_body"
    lines = [rec for rec in caplog.records if rec.name == "precast.api"]
    assert len(lines) == 1 and lines[0].exc_info is None


def test_trailing_slash_is_a_json_404_not_a_redirect_built_from_host():
    svc = make_service(allowed_hosts=["*"])  # a Host the allow-list would refuse first
    client = TestClient(make_app(svc), follow_redirects=False)
    r = client.get("/v1/predictions/?ids=a", headers={"host": "evil.example"})
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert "location" not in r.headers


def test_local_budget_ceiling():
    clock = Clock()
    b = LocalBudget(rate_per_s=10, burst=5, clock=clock)
    d = asyncio.run(b.admit([f"d{i}" for i in range(8)], 1000))
    assert len(d.admitted) == 5 and len(d.over_budget) == 3
    clock.t = 0.3
    assert len(asyncio.run(b.admit(["x", "y", "z", "w"], 1000)).admitted) == 3


def test_prefetch_counts_over_budget():
    from precast.kafka import Producer
    from precast.settings import KafkaSettings

    # librdkafka queues locally without a broker: produce() succeeds, nothing is sent
    producer = Producer(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    svc = make_service(
        producer=producer, precompute_budget_per_s=1, precompute_burst=3, grace_s=600
    )
    now = now_ms()
    for d in "abcde":  # known devices with expired answers (unknown ones never ask)
        svc.view.put_if_newer(d, prediction(d, now - 70_000, horizon_ms=5_000))
    client = TestClient(make_app(svc))
    r = client.post("/v1/prefetch", json={"device_ids": ["a", "b", "c", "d", "e"]})
    assert r.json() == {
        "sent": 3,
        "deduplicated": 0,
        "dropped": 0,
        "over_budget": 2,
        "fresh": 0,
        "unknown": 0,
    }
    # the refused ones may ask again later; the sent ones are deduplicated
    r = client.post("/v1/prefetch", json={"device_ids": ["a", "d"]})
    assert r.json()["deduplicated"] == 1 and r.json()["over_budget"] == 1


def test_silent_sockets_are_found_and_shut_down():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        quiet = socket.create_connection(("127.0.0.1", port))
        talker = socket.create_connection(("127.0.0.1", port))
        a, _ = listener.accept()
        b, _ = listener.accept()
        talker.sendall(b"GET / HTTP/1.1\r\n")
        time.sleep(0.2)
        info = a.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
        assert silent_for_ms(info) is not None
        # one of the two accepted sockets has received bytes: only the other is shut down
        assert sweep(port, 100) == 1
        assert quiet.recv(1) == b""
        talker.settimeout(0.2)
        with pytest.raises(TimeoutError):
            talker.recv(1)
        for s in (quiet, talker, a, b):
            s.close()


def test_open_file_limit_is_raised_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024), hard))
        got = raise_open_files(100)
        assert got == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert hard == resource.RLIM_INFINITY or got == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_board_streams_share_the_replica_cap():
    svc = make_service(sse_max_streams=1)
    client = TestClient(make_app(svc))  # the app includes the board
    assert svc.hub.reserve()  # another stream holds the only slot
    for path in ("/v1/board/stream", "/v1/stream?ids=dev-1"):
        busy = client.get(path)
        assert busy.status_code == 503 and busy.json()["error"] == "too_many_streams"
    assert svc.hub.streams == 1
