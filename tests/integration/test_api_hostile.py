"""The read API under hostile clients, as its own process on each server, with small bounded
loopback loads: idle and slow connections time out while the replica answers, the stream cap
is exact under concurrent opens and churn, per-client limits answer 429 with Retry-After, a
prefetch flood stays within the budget shared by two replicas, a spoofed beacon cannot swing
the delay shares, and errors stay one JSON answer and one log line. The 10,000-connection flood
is behind the slow marker; its figures come from `python -m bench hostile`."""

from __future__ import annotations

import http.client
import socket
import time
import uuid

import orjson
import pytest

from bench.support.loads.hostile_load import (
    api_process,
    close_all,
    get,
    latencies_ms,
    open_idle,
    open_streams,
    raise_fd_limit,
    still_open,
)
from opsctl.stack.process import free_port
from tests.integration.api_helpers import prediction_value, publish, wait_for
from tests.integration.test_api_pipeline import read_all

SERVERS = ["granian", "uvicorn"]


def env(kafka_settings, topics, server: str = "granian", redis_url: str = "", **api) -> dict:
    out = {
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_REDIS__URL": redis_url,
        "PRECAST_REDIS__KEY_PREFIX": f"hostile-{uuid.uuid4().hex[:8]}:",
        "PRECAST_API__SERVER": server,
        "PRECAST_LOG_LEVEL": "INFO",
    }
    out.update({f"PRECAST_API__{k.upper()}": str(v) for k, v in api.items()})
    return out


def post(port: int, path: str, doc: object, source: str = "127.0.0.1") -> tuple[int, dict, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        c.request("POST", path, orjson.dumps(doc), {"content-type": "application/json"})
        r = c.getresponse()
        body = r.read()
        return r.status, (orjson.loads(body) if body else {}), dict(r.getheaders())
    finally:
        c.close()


def raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(4096)
            except TimeoutError:
                break
            if not chunk:
                break
            out += chunk
        return out


@pytest.mark.parametrize("server", SERVERS)
def test_idle_and_slow_connections_time_out_while_the_replica_answers(
    kafka_settings, topics, server
):
    now = int(time.time() * 1000)
    publish(
        kafka_settings, topics.predictions.name, [("dev-1", prediction_value("dev-1", now, now))]
    )
    port = free_port()
    with api_process(port, env(kafka_settings, topics, server, header_timeout_s=2)) as api:
        wait_for(lambda: get(port, "/v1/devices/dev-1/prediction")[0] == 200, what="dev-1")
        idle = open_idle(port, 300)  # past granian's default backlog/backpressure of 128
        slow = open_idle(port, 50, b"GET /healthz HTTP/1.1\r\nHo")  # a head never finished
        try:
            # the replica answers every probe and read while it holds them all
            assert get(port, "/healthz")[0] == 200 and get(port, "/readyz")[0] == 200
            assert len(latencies_ms(port, "/v1/devices/dev-1/prediction", 50)) == 50
            assert still_open(idle) == 300 and still_open(slow) == 50
            wait_for(lambda: still_open(idle) == 0, 15, 0.2, what="idle sockets closed")
            wait_for(lambda: still_open(slow) == 0, 15, 0.2, what="slow heads closed")
            assert api.metric("precast_api_idle_connections_closed_total") >= 300
            assert get(port, "/healthz")[0] == 200
        finally:
            close_all(idle + slow)


@pytest.mark.parametrize("server", SERVERS)
def test_slow_body_gets_408_and_errors_stay_json_and_one_line(kafka_settings, topics, server):
    port = free_port()
    with api_process(port, env(kafka_settings, topics, server, body_timeout_s=1)) as api:
        head = (
            b"POST /v1/prefetch HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
        )
        r = raw(port, head + b'content-length: 100\r\n\r\n{"dev', timeout=5)
        assert r.startswith(b"HTTP/1.1 408") and b'"error":"body_timeout"' in r
        for _ in range(20):  # clients that go away mid-body
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(head + b'content-length: 1000\r\n\r\n{"device_ids":')
                time.sleep(0.02)
        wait_for(
            lambda: api.metric("precast_api_client_disconnects_total") >= 20, 10, what="counted"
        )
        log = api.log_text()
        assert "Traceback" not in log
        assert log.count("client went away") <= 21  # one line each, never a traceback
        # a trailing-slash path is a 404 in JSON, never a redirect built from Host
        r = raw(port, b"GET /v1/predictions/?ids=a HTTP/1.1\r\nHost: localhost:1\r\n\r\n", 2)
        assert r.startswith(b"HTTP/1.1 404") and b"location" not in r.lower()
        assert b'"error":"not_found"' in r
        # a Host the API does not answer (DNS rebinding): 421, the fast path included
        for path in (b"/v1/predictions?ids=a", b"/v1/devices/d-1/prediction"):
            r = raw(port, b"GET %s HTTP/1.1\r\nHost: evil.example\r\n\r\n" % path, 2)
            assert r.startswith(b"HTTP/1.1 421") and b"evil.example" not in r
        if server == "granian":  # uvicorn answers a bad chunk itself, before the app sees it
            r = raw(port, head + b"transfer-encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n", 2)
            assert r.startswith(b"HTTP/1.1 400") and b'"error":"bad_body"' in r


def test_stream_cap_is_exact_under_concurrent_opens_and_churn(kafka_settings, topics):
    port = free_port()
    e = env(kafka_settings, topics, sse_max_streams=20, client_max_streams=1000)
    with api_process(port, e) as api:
        for _ in range(3):  # open 60 at once, close them all; slots come back every time
            statuses, socks = open_streams(port, 60, "/v1/stream?ids=dev-1,dev-2")
            try:
                assert statuses.count(200) == 20 and statuses.count(503) == 40
                assert api.metric("precast_api_event_streams") == 20
            finally:
                close_all(socks)
            wait_for(
                lambda: api.metric("precast_api_event_streams") == 0, 10, what="streams released"
            )


def test_per_client_stream_limit_answers_429(kafka_settings, topics):
    port = free_port()
    with api_process(port, env(kafka_settings, topics, client_max_streams=3)):
        statuses, socks = open_streams(port, 4, "/v1/stream?ids=dev-1")
        try:
            assert sorted(statuses) == [200, 200, 200, 429]
            c = http.client.HTTPConnection("127.0.0.1", port, 5, ("127.0.0.2", 0))
            c.request("GET", "/v1/stream?ids=dev-1")  # the same address as those four
            r = c.getresponse()
            assert r.status == 429 and int(r.getheader("retry-after")) >= 1
            assert orjson.loads(r.read())["error"] == "too_many_streams_for_client"
            c.close()
            # another address is another client
            other, more = open_streams(port, 1, "/v1/stream?ids=dev-1", first=5_000 * 5)
            assert other == [200]
            close_all(more)
        finally:
            close_all(socks)


def test_prefetch_flood_stays_within_the_budget_shared_by_two_replicas(
    kafka_settings, topics, redis_settings, unique
):
    e = env(
        kafka_settings,
        topics,
        redis_url=redis_settings.url,
        precompute_budget_per_s=20,
        precompute_burst=20,
        client_prefetch_per_s=10_000,
        client_prefetch_burst=10_000,
        request_window_s=60,
        grace_s=600,
    )
    # Devices the store knows, with expired answers: only those ask (unknown IDs never do,
    # issue 11), so the flood names 2,000 of them.
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        topics.predictions.name,
        [
            (d, prediction_value(d, now - 20_000, now - 19_000, horizon_ms=5_000))
            for d in (f"flood-{i}-{j}" for i in range(20) for j in range(100))
        ],
    )
    ports = [free_port(), free_port()]
    with api_process(ports[0], e), api_process(ports[1], e):
        sums = dict.fromkeys(("sent", "deduplicated", "over_budget", "dropped", "fresh"), 0)
        t0 = time.monotonic()
        for i in range(20):  # one client: 20 hints of 100 new devices, alternating replicas
            ids = [f"flood-{i}-{j}" for j in range(100)]
            status, counts, _ = post(ports[i % 2], "/v1/prefetch", {"device_ids": ids})
            assert status == 202
            for k in sums:
                sums[k] += counts[k]
        elapsed = time.monotonic() - t0
        assert sums["sent"] + sums["over_budget"] == 2_000
        assert sums["sent"] <= 20 + 20 * elapsed + 1
        msgs = read_all(
            kafka_settings,
            topics.precompute_requests.name,
            topics.precompute_requests.partitions,
            unique("chk"),
        )
        assert len(msgs) == sums["sent"]  # nothing asked beyond what the answers said
        assert len({m.key() for m in msgs}) == len(msgs)  # and no device twice
        # What replica 0 sent (the even hints went there), replica 1 does not send again: the
        # dedup is shared in Redis. Only IDs that were sent: an ID that was over budget the
        # first time is not deduplicated and may be sent now from the refilled budget.
        by_0 = sorted(k for k in (m.key().decode() for m in msgs) if int(k.split("-")[1]) % 2 == 0)[
            :100
        ]
        assert by_0  # the first hint (to replica 0) always gets the burst of 20
        again = post(ports[1], "/v1/prefetch", {"device_ids": by_0})[1]
        assert (again["sent"], again["deduplicated"]) == (0, len(by_0))
    after = read_all(
        kafka_settings,
        topics.precompute_requests.name,
        topics.precompute_requests.partitions,
        unique("chk"),
    )
    assert len(after) == len(msgs)  # the repeat asked nothing


def test_prefetch_rate_per_client_answers_429(kafka_settings, topics):
    port = free_port()
    e = env(kafka_settings, topics, client_prefetch_per_s=1, client_prefetch_burst=150)
    with api_process(port, e):
        ids = [f"p-{j}" for j in range(100)]
        assert post(port, "/v1/prefetch", {"device_ids": ids})[0] == 202
        status, body, headers = post(port, "/v1/prefetch", {"device_ids": ids})
        assert status == 429 and body["error"] == "rate_limited"
        assert int(headers["retry-after"]) >= 1
        assert post(port, "/v1/prefetch", {"device_ids": ids}, source="127.0.0.9")[0] == 202


def test_spoofed_beacons_cannot_swing_the_delay_share(kafka_settings, topics):
    port = free_port()
    with api_process(port, env(kafka_settings, topics)) as api:  # 20 beacons at once per client
        honest = {
            "input_to_shown_ms": 300,
            "network_ms": 50,
            "wait": {"read": 0.05, "db_lock": 0.02},
            "age": {"queue": 20, "model": 5, "kafka": 3, "cache": 100},
        }
        for i in range(5):
            assert post(port, "/v1/beacon", {"timings": [honest]}, f"127.0.0.{2 + i}")[0] == 204
        kafka = {"input_to_shown_ms": 0, "network_ms": 0, "age": {"kafka": 3_600_000}}
        for _ in range(50):  # the hostile client, as often as its allowance lets it
            post(port, "/v1/beacon", {"timings": [kafka] * 100}, "127.0.0.40")
        share = api.metric("precast_age_origin_share", '{origin="kafka"}')
        assert share < 0.05
        assert api.metric("precast_beacon_values_clipped_total") >= 100
        status, body, headers = post(port, "/v1/beacon", {"timings": [kafka]}, "127.0.0.40")
        assert status == 429 and int(headers["retry-after"]) >= 1


@pytest.mark.slow
def test_ten_thousand_idle_connections_and_a_thousand_streams(kafka_settings, topics):
    if raise_fd_limit() < 12_000:  # this process and the server each hold 11,000 sockets
        pytest.skip("the hard open-file limit is below 12,000 (ulimit -Hn)")
    now = int(time.time() * 1000)
    publish(
        kafka_settings, topics.predictions.name, [("dev-1", prediction_value("dev-1", now, now))]
    )
    port = free_port()
    e = env(kafka_settings, topics, header_timeout_s=120, client_max_streams=2_000)
    with api_process(port, e) as api:
        wait_for(lambda: get(port, "/v1/devices/dev-1/prediction")[0] == 200, what="dev-1")
        idle = open_idle(port, 10_000)
        statuses, streams = open_streams(port, 1_000, "/v1/stream?ids=dev-1", first=10_000)
        try:
            assert statuses.count(200) == 1_000
            assert len(latencies_ms(port, "/v1/devices/dev-1/prediction", 500)) == 500
            assert get(port, "/healthz")[0] == 200
            assert still_open(idle) == 10_000 and still_open(streams) == 1_000
            assert api.metric("precast_api_event_streams") == 1_000
        finally:
            close_all(idle + streams)
