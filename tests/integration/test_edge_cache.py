"""The read API behind a real Varnish with deploy/edge/precast.vcl: the headers people and
tools read, keys that stay inside, newest-wins within the stated bound, no copy served past its
valid_until, ETag revalidation, `precast purge` reaching the edge exactly, and one client's
answer never served to another."""

from __future__ import annotations

import json
import time

import httpx2
import orjson

from precast.tokens import line_for, new_token
from tests.integration.api_helpers import prediction_value, publish, wait_for
from tests.integration.edge_support import (
    api_process,
    api_purging_its_edge,
    backend_of,
    edge_node,
    edge_settings,
)
from tests.integration.ops_support import cli_env, precast

PATH = "/v1/devices/{}/prediction"
# docs/api.md, "Behind a cache or CDN": a newer answer replaces the cached one within this long
# of the replica storing it (the purge interval, 100 ms by default, plus one round trip, plus
# the 0.5 s a soft-purged copy stays usable while the edge fetches the newer one).
NEWEST_BOUND_S = 1.0


def _now() -> int:
    return int(time.time() * 1000)


def answers(kafka_settings, topics, items: list[tuple[str, bytes]]) -> None:
    publish(kafka_settings, topics.predictions.name, items)


def get(client: httpx2.Client, device: str, **headers: str) -> httpx2.Response:
    return client.get(PATH.format(device), headers=headers)


def test_cached_answers_carry_age_cache_status_and_server_timing(kafka_settings, topics, tmp_path):
    now = _now()
    answers(
        kafka_settings,
        topics,
        [("dev-1", prediction_value("dev-1", now - 100, now - 50, version="1.3.7-rc.1"))],
    )
    with (
        api_process(kafka_settings, topics, tmp_path / "api.log") as api,
        edge_node(edge_settings(tmp_path, [backend_of(api)])) as edge,
        httpx2.Client(base_url=edge.url, timeout=5) as c,
    ):
        first = get(c, "dev-1")
        assert first.status_code == 200 and first.json()["source"] == "precomputed"
        assert first.headers["cache-status"].startswith("precast-edge; fwd=miss")
        assert first.headers["cache-status"].endswith("; stored")
        # the keys are for the edge: never shown to clients
        assert "surrogate-key" not in first.headers and "xkey" not in first.headers
        timing = first.headers["server-timing"]
        assert timing.startswith("age.queue;dur=") and "wait.read;dur=" in timing
        assert "edge;desc=miss;dur=" in timing
        time.sleep(1.1)
        hit = get(c, "dev-1")
        assert hit.headers["cache-status"].startswith("precast-edge; hit; ttl=")
        assert int(hit.headers["age"]) >= 1 and hit.content == first.content
        assert (
            hit.headers["server-timing"].endswith(hit.headers["server-timing"].rsplit(", ", 1)[-1])
            and ", edge;desc=hit;dur=" in hit.headers["server-timing"]
        )
        # the client's own revalidation is answered by the edge
        again = get(c, "dev-1", **{"if-none-match": first.headers["etag"]})
        assert again.status_code == 304 and again.headers["etag"] == first.headers["etag"]
        # a fallback is never stored: every read of an unknown device reaches the API
        for _ in range(2):
            unknown = get(c, "dev-unknown")
            assert unknown.json()["source"] == "fallback"
            assert unknown.headers["cache-status"] == ("precast-edge; fwd=miss; fwd-status=200")
        # errors pass through, never cached
        bad = c.get(PATH.format("dev-1") + "?x=1")
        assert bad.status_code == 400 and "stored" not in bad.headers["cache-status"]
        # purges: a key list is required, a device key drops that device's copy
        assert c.request("PURGE", "/").status_code == 400
        purged = c.request("PURGE", "/", headers={"xkey-purge": "d:dev-1"})
        assert purged.status_code == 200 and purged.text.strip() == "purged 1"
        assert get(c, "dev-1").headers["cache-status"].startswith("precast-edge; fwd=miss")
        # other methods pass to the API, which refuses them
        for method in ("POST", "DELETE"):
            r = c.request(method, PATH.format("dev-1"))
            assert r.status_code == 405 and "bypass" in r.headers["cache-status"]


def test_a_newer_answer_replaces_the_cached_one_within_the_bound(kafka_settings, topics, tmp_path):
    now = _now()
    answers(kafka_settings, topics, [("dev-n", prediction_value("dev-n", now - 1_000, now - 900))])
    with (
        api_purging_its_edge(kafka_settings, topics, tmp_path) as (api, edge_url),
        httpx2.Client(timeout=5) as c,
    ):
        for _ in range(2):
            r = c.get(edge_url + PATH.format("dev-n"))
        assert r.headers["cache-status"].startswith("precast-edge; hit")
        old = r.json()["computed_at_ms"]
        newer = _now()
        answers(kafka_settings, topics, [("dev-n", prediction_value("dev-n", newer, newer + 5))])
        wait_for(
            lambda: c.get(api + PATH.format("dev-n")).json()["computed_at_ms"] == newer,
            20,
            0.005,
            what="the API stores the newer answer",
        )
        stored_at = time.monotonic()
        served: list[tuple[float, int]] = []

        def edge_has_it() -> bool:
            computed = c.get(edge_url + PATH.format("dev-n")).json()["computed_at_ms"]
            served.append((time.monotonic() - stored_at, computed))
            return computed == newer

        wait_for(edge_has_it, 10, 0.01, what="the edge serves the newer answer")
        late = [(t, v) for t, v in served if v == old and t > NEWEST_BOUND_S]
        assert not late, f"older answer served past the bound: {late[:3]}"


def test_no_copy_outlives_valid_until_and_expiry_revalidates_by_etag(
    kafka_settings, topics, tmp_path
):
    with (
        api_process(kafka_settings, topics, tmp_path / "api.log") as api,
        edge_node(edge_settings(tmp_path, [backend_of(api)])) as edge,
        httpx2.Client(base_url=edge.url, timeout=5) as c,
    ):
        now = _now()  # after the start: the answer is valid for 3.9 s from now
        answers(
            kafka_settings,
            topics,
            [("dev-v", prediction_value("dev-v", now, now + 5, horizon_ms=3_900))],
        )
        valid_until = now + 3_900
        wait_for(
            lambda: get(c, "dev-v").json()["source"] == "precomputed",
            3,
            0.01,
            what="the API serves it",
        )
        seen: list[tuple[int, dict, str]] = []
        while _now() < valid_until + 1_500:
            asked = _now()
            r = get(c, "dev-v")
            seen.append((asked, r.json(), r.headers["cache-status"]))
            time.sleep(0.05)
    precomputed = [(t, doc) for t, doc, _ in seen if doc["source"] == "precomputed"]
    assert precomputed, "the answer was never served"
    past = [(t, doc["valid_until_ms"]) for t, doc in precomputed if t >= doc["valid_until_ms"]]
    assert not past, f"served past valid_until: {past[:3]}"
    assert any(doc["source"] != "precomputed" for t, doc, _ in seen if t > valid_until + 200)
    statuses = [s for _, _, s in seen]
    assert any("hit" in s for s in statuses)
    # the copy was refreshed with a conditional request the API answered 304
    assert any("revalidated" in s or "fwd-status=304" in s for s in statuses), statuses


VERSIONS = {
    "dev-a": "1.3.0",
    "dev-b": "1.3.7-rc.1",
    "dev-c": "1.3.7-hotfix",
    "dev-d": "v1.3.9",
    "dev-e": "1.30.0",
    "dev-f": "11.3.0",
    "dev-g": "1.2.9",
}
PURGED = {"dev-a", "dev-b", "dev-c", "dev-d"}


def test_precast_purge_reaches_the_edge_exactly(kafka_settings, topics, tmp_path):
    now = _now()
    answers(
        kafka_settings,
        topics,
        [(d, prediction_value(d, now - 100, now - 50, version=v)) for d, v in VERSIONS.items()],
    )
    # The API sends no purges of its own here: what leaves the edge is the command's doing.
    with (
        api_process(kafka_settings, topics, tmp_path / "api.log") as api,
        edge_node(edge_settings(tmp_path, [backend_of(api)])) as edge,
    ):
        env = cli_env(
            kafka_settings,
            tmp_path / "state",
            PRECAST_TOPICS__PREFIX=topics.predictions.name.removesuffix("predictions"),
            PRECAST_TOPICS__PARTITIONS=str(topics.predictions.partitions),
            PRECAST_REDIS__URL="",
            PRECAST_EDGE__PURGE_URLS=json.dumps([edge.url]),
        )
        with httpx2.Client(base_url=edge.url, timeout=5) as c:
            for d in VERSIONS:
                get(c, d)
            assert all(
                get(c, d).headers["cache-status"].startswith("precast-edge; hit") for d in VERSIONS
            )
            dry = precast(env, "purge", "1.3", "--no-progress")
            assert dry.returncode == 0, dry.stderr
            assert "edge: with --yes, purge keys ml:1.3 " in dry.stdout
            assert all(
                get(c, d).headers["cache-status"].startswith("precast-edge; hit") for d in VERSIONS
            )
            done = precast(env, "purge", "1.3", "--yes", "--no-progress")
            assert done.returncode == 0, done.stderr
            assert "edge: purged keys ml:1.3 at " in done.stdout
            assert "4 cached copies dropped" in done.stdout, done.stdout
            after = {d: get(c, d).headers["cache-status"] for d in VERSIONS}
            assert {d for d, s in after.items() if "hit" not in s} == PURGED, after


def test_purge_to_an_unreachable_edge_fails_with_one_line(kafka_settings, topics, tmp_path):
    now = _now()
    answers(
        kafka_settings,
        topics,
        [("dev-x", prediction_value("dev-x", now - 100, now - 50, version="2.0.0"))],
    )
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=topics.predictions.name.removesuffix("predictions"),
        PRECAST_TOPICS__PARTITIONS=str(topics.predictions.partitions),
        PRECAST_REDIS__URL="",
        PRECAST_EDGE__PURGE_URLS='["http://127.0.0.1:1"]',
    )
    r = precast(env, "purge", "2", "--yes", "--no-progress")
    assert r.returncode == 1 and "purge markers written" in r.stdout
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "edge purge failed at http://127.0.0.1:1" in lines[0], r.stderr


def test_one_clients_answer_is_never_served_to_another(kafka_settings, topics, tmp_path):
    now = _now()
    answers(kafka_settings, topics, [("dev-t", prediction_value("dev-t", now - 100, now - 50))])
    reader, other_reader, no_read = new_token(), new_token(), new_token()
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "\n".join(
            [
                line_for("reader", frozenset({"read"}), reader),
                line_for("other", frozenset({"read"}), other_reader),
                line_for("prefetcher", frozenset({"prefetch"}), no_read),
            ]
        )
        + "\n"
    )
    tokens.chmod(0o600)
    with (
        api_process(
            kafka_settings, topics, tmp_path / "api.log", PRECAST_API__TOKENS_FILE=str(tokens)
        ) as api,
        edge_node(edge_settings(tmp_path, [backend_of(api)])) as edge,
        httpx2.Client(base_url=edge.url, timeout=5) as c,
    ):
        first = get(c, "dev-t", authorization=f"Bearer {reader}")
        assert first.status_code == 200 and "stored" in first.headers["cache-status"]
        # the same credentials, written differently: the same copy
        same = get(c, "dev-t", authorization=f"bearer   {reader}")
        assert same.status_code == 200
        assert same.headers["cache-status"].startswith("precast-edge; hit")
        ttl = int(same.headers["cache-status"].split("ttl=")[1].split(";")[0])
        assert ttl <= 1  # a copy fetched with a token lives at most 2 s, grace included
        for _ in range(3):
            refused = get(c, "dev-t", authorization=f"Bearer {no_read}")
            assert refused.status_code == 403 and b"candidates" not in refused.content
            anonymous = get(c, "dev-t")
            assert anonymous.status_code == 401 and b"candidates" not in anonymous.content
            forged = get(c, "dev-t", authorization=f"Bearer {reader[:-2]}xx")
            assert forged.status_code == 401
        own = get(c, "dev-t", authorization=f"Bearer {other_reader}")
        assert own.status_code == 200
        assert own.headers["cache-status"].startswith("precast-edge; fwd=miss")
        assert orjson.loads(own.content)["computed_at_ms"] == now - 100


def test_no_replica_ready_is_a_json_503_with_retry_after(tmp_path):
    with edge_node(edge_settings(tmp_path, ["127.0.0.1:1"])) as edge:
        r = httpx2.get(edge.url + PATH.format("dev-1"), timeout=10)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"] == "origin_unavailable"
    assert r.headers["cache-control"] == "no-store"


def _leased(device: str, computed: int, partition: int, generation: int) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [{"strategy": "monitor_only", "score": 0.5}],
            "model_version": "1.0.0",
            "computed_at_ms": computed,
            "valid_until_ms": computed + 2_000,
            "produced_at_ms": computed + 5,
            "trigger": "heartbeat",
            "lineage": [],
            "lease": {
                "partition": partition,
                "generation": generation,
                "until_ms": computed + 600_000,
            },
        }
    )


def _lease(partition: int, generation: int, certified: int, valid_for_ms: int) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "kind": "validity_lease",
            "partition": partition,
            "generation": generation,
            "certified_at_ms": certified,
            "valid_until_ms": certified + valid_for_ms,
            "produced_at_ms": certified + 1,
            "devices": 1,
        }
    )


def test_a_leased_answer_stays_at_the_edge_while_leases_come_and_goes_before_they_lapse(
    kafka_settings, topics, tmp_path
):
    from precast.kafka import Producer
    from schemas.leases import lease_key

    with (
        api_purging_its_edge(
            kafka_settings,
            topics,
            tmp_path,
            PRECAST_EDGE__LEASE_TTL_S="30",
            PRECAST_EDGE__LEASE_GUARD_MS="500",
        ) as (api, edge_url),
        httpx2.Client(base_url=edge_url, timeout=5) as c,
    ):
        p = Producer(kafka_settings)
        now = _now()
        p.produce(
            topics.predictions.name, b"dev-l", _leased("dev-l", now - 1_000, 0, 7), partition=0
        )
        p.produce(topics.predictions.name, lease_key(0), _lease(0, 7, now, 2_500), partition=0)
        p.flush()
        wait_for(
            lambda: c.get(api + PATH.format("dev-l")).json().get("extended_by") is not None,
            10,
            0.02,
            what="the API serves it under the lease",
        )
        first = get(c, "dev-l")
        assert "s-maxage=" in first.headers["cache-control"], first.headers
        first_end = first.json()["valid_until_ms"]
        # a renewal before the end: the copy stays at the edge past its first validity
        certified = _now()
        p.produce(
            topics.predictions.name, lease_key(0), _lease(0, 7, certified, 4_000), partition=0
        )
        p.flush()
        renewed_end = certified + 4_000
        seen: list[tuple[int, str, str]] = []
        while _now() < renewed_end + 1_500:
            asked = _now()
            r = get(c, "dev-l")
            seen.append((asked, r.json()["source"], r.headers["cache-status"]))
            time.sleep(0.05)
    hits_after_first_end = [s for t, _, s in seen if t > first_end + 200 and " hit" in s]
    assert hits_after_first_end, "the renewed lease kept the copy at the edge"
    late = [(t, s) for t, src, s in seen if src == "precomputed" and t >= renewed_end]
    assert not late, f"served past the lease's end: {late[:3]}"
