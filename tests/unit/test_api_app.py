"""The read API over an in-memory view: semantics, headers, validation, auth, OpenAPI."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import Route
from starlette.testclient import TestClient

from consumer_api.openapi import build_spec
from consumer_api.read.answer import fresh, origin, segments
from tests.api_fixtures import make_app, make_service, now_ms, prediction

ONE = "/v1/devices/{d}/prediction"


@pytest.fixture
def svc():
    return make_service()


@pytest.fixture
def client(svc):
    return TestClient(make_app(svc))


def test_precomputed_answer_and_headers(svc, client):
    now = now_ms()
    e = prediction(
        "dev-1", now - 100, horizon_ms=30_000, produced=now - 70, received=now - 60, inference_ms=10
    )
    svc.view.put_if_newer("dev-1", e)
    r = client.get(ONE.format(d="dev-1"))
    assert r.status_code == 200
    body = r.json()
    assert body["source"] == "precomputed" and body["device_id"] == "dev-1"
    assert [c["strategy"] for c in body["candidates"]] == ["remote_restart", "monitor_only"]
    assert body["model_version"] == "1.0.0" == r.headers["x-model-version"]
    assert body["computed_at_ms"] == now - 100 and body["valid_until_ms"] == now + 29_900
    assert 100 <= body["age_ms"] < 2_000
    assert (
        body["delay_origin"] == "cache"
    )  # now - received (>= 60 ms) beats queue 20, model 10, kafka 10
    max_age = int(r.headers["cache-control"].removeprefix("max-age="))
    assert 27 <= max_age <= 29  # floor((valid_until - now) / 1000)
    timing = dict(part.split(";dur=") for part in r.headers["server-timing"].split(", "))
    assert timing["age.queue"] == "20" and timing["age.model"] == "10"
    assert timing["age.kafka"] == "10" and int(timing["age.cache"]) >= 60
    # what the read waited for on the server: measured, in ms with microseconds
    assert set(timing) == {
        "age.queue",
        "age.model",
        "age.kafka",
        "age.cache",
        "wait.read",
        "wait.db_lock",
    }
    assert all(0 <= float(timing[k]) < 1_000 for k in ("wait.read", "wait.db_lock"))
    etag = r.headers["etag"]
    assert etag.startswith('W/"')
    r304 = client.get(ONE.format(d="dev-1"), headers={"If-None-Match": etag})
    assert r304.status_code == 304 and r304.content == b"" and r304.headers["etag"] == etag
    assert (
        client.get(ONE.format(d="dev-1"), headers={"If-None-Match": 'W/"other"'}).status_code == 200
    )


def test_newer_prediction_changes_etag(svc, client):
    now = now_ms()
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 100))
    first = client.get(ONE.format(d="dev-1")).headers["etag"]
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 50))
    r = client.get(ONE.format(d="dev-1"), headers={"If-None-Match": first})
    assert r.status_code == 200 and r.json()["computed_at_ms"] == now - 50


def test_an_unknown_device_is_the_default_strategy_marked_fallback(client):
    r = client.get(ONE.format(d="dev-404"))
    body = r.json()
    assert r.status_code == 200
    assert (
        body["source"] == "fallback"
        and body["delay_origin"] == "fallback"
        and body["reason"] == "unknown_device"
    )
    assert body["candidates"] == [{"strategy": "monitor_only", "score": 1.0}]
    assert body["model_version"] is None and "x-model-version" not in r.headers
    assert r.headers["cache-control"] == "no-store" and "etag" not in r.headers
    # no data, so no age: only what the read waited for
    names = [part.split(";")[0] for part in r.headers["server-timing"].split(", ")]
    assert names == ["wait.read", "wait.db_lock"]


@pytest.mark.parametrize("policy, source", [("stale", "stale"), ("fallback", "fallback")])
def test_expired_entry_is_stale_or_fallback_per_configuration(policy, source):
    svc = make_service(expired=policy, grace_s=60)
    now = now_ms()
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 10_000, horizon_ms=5_000))
    r = TestClient(make_app(svc)).get(ONE.format(d="dev-1"))
    body = r.json()
    assert body["source"] == source
    if source == "stale":
        assert body["model_version"] == "1.0.0" and r.headers["cache-control"] == "no-cache"
        assert r.headers["etag"].endswith('-stale"')
    else:
        assert body["reason"] == "expired" and body["candidates"][0]["strategy"] == "monitor_only"


def test_past_grace_is_gone():
    svc = make_service(expired="stale", grace_s=1)
    svc.view.put_if_newer("dev-1", prediction("dev-1", now_ms() - 10_000, horizon_ms=5_000))
    assert TestClient(make_app(svc)).get(ONE.format(d="dev-1")).json()["reason"] == "unknown_device"


def test_purge_marker_is_served_like_a_miss(svc, client):
    now = now_ms()
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 100))
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 100, produced=now, purge=True))
    body = client.get(ONE.format(d="dev-1")).json()
    assert body["source"] == "fallback" and body["reason"] == "purged"


def test_batch_keeps_order_and_removes_duplicates(svc, client):
    now = now_ms()
    for d in ("dev-1", "dev-3"):
        svc.view.put_if_newer(d, prediction(d, now - 100))
    r = client.get("/v1/predictions", params={"ids": "dev-3,dev-2,dev-1,dev-3"})
    body = r.json()
    assert body["count"] == 3
    assert [(p["device_id"], p["source"]) for p in body["predictions"]] == [
        ("dev-3", "precomputed"),
        ("dev-2", "fallback"),
        ("dev-1", "precomputed"),
    ]
    assert r.headers["cache-control"] == "no-cache"
    # one wait for the whole list (the items' ages are in their bodies)
    assert [p.split(";")[0] for p in r.headers["server-timing"].split(", ")] == [
        "wait.read",
        "wait.db_lock",
    ]
    again = client.get(
        "/v1/predictions",
        params={"ids": "dev-3,dev-2,dev-1"},
        headers={"If-None-Match": r.headers["etag"]},
    )
    assert again.status_code == 304


def test_delay_origin_segments():
    e = prediction("dev-1", 1_000_000, produced=1_000_300, received=1_000_310, inference_ms=50)
    assert segments(e, 1_000_400) == (250, 50, 10, 90)
    assert origin(segments(e, 1_000_400)) == "queue"
    assert origin(segments(e, 1_001_000)) == "cache"


def test_beacon_feeds_the_wait_and_age_metrics(client):
    r = client.post(
        "/v1/beacon",
        json={
            "timings": [
                {
                    "input_to_shown_ms": 400,
                    "network_ms": 100,
                    "wait": {"read": 0.05, "db_lock": 0.02},
                    "age": {"queue": 3, "cache": 900},
                }
            ]
        },
    )
    assert r.status_code == 204
    metrics = client.get("/metrics").text
    assert 'precast_wait_origin_share{origin="front_jank"} 0.75' in metrics
    assert 'precast_age_origin_share{origin="cache"}' in metrics
    assert "precast_wait_p95_seconds " in metrics and "precast_beacon_clients 1.0" in metrics


def test_prefetch_counts_fresh_unknown_and_unavailable(svc, client):
    now = now_ms()
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 100))
    svc.view.put_if_newer("dev-3", prediction("dev-3", now - 100, produced=now, purge=True))
    r = client.post("/v1/prefetch", json={"device_ids": ["dev-1", "dev-2", "dev-2", "dev-3"]})
    assert r.status_code == 202
    # no producer in this unit test: the purged device's request cannot be sent, and says so;
    # the unknown device is never asked for
    assert r.json() == {
        "sent": 0,
        "deduplicated": 0,
        "dropped": 1,
        "over_budget": 0,
        "fresh": 1,
        "unknown": 1,
    }


def test_probes_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok", "tokens": "none"}
    assert client.get("/readyz").status_code == 200
    assert client.get("/openapi.json").json()["openapi"].startswith("3.")


def test_every_route_is_documented_and_every_documented_path_exists(svc):
    app = make_app(svc)
    SPEC = build_spec(svc.options, board=True)
    table = app.app.app.routes  # Host allow-list -> fast path -> Starlette
    routes = {r.path for r in table if isinstance(r, Route)} | {
        "/v1/devices/{device_id}/prediction"
    }
    assert routes == set(SPEC["paths"])
    for r in table:
        documented = {m.upper() for m in SPEC["paths"][r.path]}
        assert documented == set(r.methods) - {"HEAD"}, r.path
    client = TestClient(app)
    for path in SPEC["paths"]:
        if "{" not in path and path not in ("/v1/stream", "/v1/board/stream"):
            assert client.request(next(iter(SPEC["paths"][path])).upper(), path).status_code != 404


LONG = "d" * 129
BAD_INPUTS = [
    # (method, path, kwargs, status, error, parameter)
    ("GET", "/v1/devices/bad%20id/prediction", {}, 400, "invalid_device_id", "device_id"),
    ("GET", f"/v1/devices/{LONG}/prediction", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/devices/-x/prediction", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/devices/a%0d%0aFLUSHALL/prediction", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/devices/x*/prediction", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/devices/a/b/prediction", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/devices/dev-1/prediction?debug=1", {}, 400, "unknown_parameter", "debug"),
    ("POST", "/v1/devices/dev-1/prediction", {}, 405, "method_not_allowed", None),
    ("GET", "/v1/predictions", {}, 400, "missing_parameter", "ids"),
    ("GET", "/v1/predictions?ids=", {}, 400, "missing_parameter", "ids"),
    ("GET", "/v1/predictions?ids=a,b%20c", {}, 400, "invalid_device_id", "ids"),
    ("GET", "/v1/predictions?ids=a&ids=b", {}, 400, "repeated_parameter", "ids"),
    ("GET", "/v1/predictions?ids=a&limit=3", {}, 400, "unknown_parameter", "limit"),
    ("GET", "/v1/board/fleet?sort=nope", {}, 400, "invalid_parameter", "sort"),
    ("GET", "/v1/board/fleet?order=up", {}, 400, "invalid_parameter", "order"),
    ("GET", "/v1/board/fleet?limit=0", {}, 400, "invalid_parameter", "limit"),
    ("GET", "/v1/board/fleet?offset=-1", {}, 400, "invalid_parameter", "offset"),
    ("GET", "/v1/board/fleet?alarm=red", {}, 400, "invalid_parameter", "alarm"),
    ("GET", "/v1/board/fleet?source=cached", {}, 400, "invalid_parameter", "source"),
    ("GET", "/v1/board/fleet?debug=1", {}, 400, "unknown_parameter", "debug"),
    ("GET", "/v1/board/fleet?site=a&site=b", {}, 400, "repeated_parameter", "site"),
    ("GET", "/v1/board/devices/bad%20id", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/board/devices/dev-never-seen", {}, 404, "unknown_device", "device_id"),
    ("GET", "/v1/board/devices/bad%20id/events", {}, 400, "invalid_device_id", "device_id"),
    ("GET", "/v1/board/devices/dev-never-seen/events", {}, 404, "no_answer", "device_id"),
    ("GET", "/v1/board/panel?x=1", {}, 400, "unknown_parameter", "x"),
    ("GET", "/v1/board/stream?last_event_id=abc", {}, 400, "invalid_parameter", "last_event_id"),
    ("GET", "/v1/board/stream?ids=a", {}, 400, "unknown_parameter", "ids"),
    ("GET", "/board/secrets.txt", {}, 404, "not_found", None),
    (
        "GET",
        "/v1/predictions?ids=" + ",".join(f"d{i}" for i in range(101)),
        {},
        400,
        "too_many_devices",
        "ids",
    ),
    ("GET", "/v1/stream", {}, 400, "missing_parameter", "ids"),
    ("GET", "/v1/stream?ids=x*", {}, 400, "invalid_device_id", "ids"),
    ("GET", "/v1/stream?ids=a&since=3", {}, 400, "unknown_parameter", "since"),
    (
        "GET",
        "/v1/stream?ids=" + ",".join(f"d{i}" for i in range(201)),
        {},
        400,
        "too_many_devices",
        "ids",
    ),
    (
        "POST",
        "/v1/prefetch",
        {"content": b"{", "headers": {"content-type": "application/json"}},
        400,
        "invalid_json",
        None,
    ),
    (
        "POST",
        "/v1/prefetch",
        {"content": b"[]", "headers": {"content-type": "text/plain"}},
        415,
        "unsupported_media_type",
        "content-type",
    ),
    (
        "POST",
        "/v1/prefetch",
        {"json": {"device_ids": ["ok", "bad id"]}},
        422,
        "invalid_body",
        "device_ids.1",
    ),
    ("POST", "/v1/prefetch", {"json": {"device_ids": []}}, 422, "invalid_body", "device_ids"),
    (
        "POST",
        "/v1/prefetch",
        {"json": {"device_ids": ["a"], "force": True}},
        422,
        "invalid_body",
        "force",
    ),
    (
        "POST",
        "/v1/prefetch",
        {"json": {"device_ids": [f"d{i}" for i in range(101)]}},
        400,
        "too_many_devices",
        "device_ids",
    ),
    ("POST", "/v1/prefetch?x=1", {"json": {"device_ids": ["a"]}}, 400, "unknown_parameter", "x"),
    (
        "POST",
        "/v1/prefetch",
        {"content": b" " * 70_000, "headers": {"content-type": "application/json"}},
        413,
        "body_too_large",
        None,
    ),
    ("GET", "/v1/prefetch", {}, 405, "method_not_allowed", None),
    (
        "POST",
        "/v1/beacon",
        {"json": {"timings": [{"input_to_shown_ms": -1, "network_ms": 1}]}},
        422,
        "invalid_body",
        "timings.0.input_to_shown_ms",
    ),
    (
        "POST",
        "/v1/beacon",
        {"json": {"timings": [{"input_to_shown_ms": 1}]}},
        422,
        "invalid_body",
        "timings.0.network_ms",
    ),
    (
        "POST",
        "/v1/beacon",
        {"json": {"timings": [{"input_to_shown_ms": 1, "network_ms": 1, "fps": 3}]}},
        422,
        "invalid_body",
        "timings.0.fps",
    ),
    (
        "POST",
        "/v1/beacon",
        {"json": {"timings": [{"input_to_shown_ms": 1, "network_ms": 1, "wait": {"db": 1}}]}},
        422,
        "invalid_body",
        "timings.0.wait.db",
    ),
    ("POST", "/v1/beacon", {"json": {"timings": []}}, 422, "invalid_body", "timings"),
    (
        "POST",
        "/v1/beacon",
        {"content": b"NaN", "headers": {"content-type": "application/json"}},
        400,
        "invalid_json",
        None,
    ),
    ("GET", "/v1/nothing", {}, 404, "not_found", None),
]


@pytest.mark.parametrize(
    "method, path, kwargs, status, code, parameter",
    BAD_INPUTS,
    ids=[f"{m} {p[:40]} {c}" for m, p, _, _, c, _ in BAD_INPUTS],
)
def test_bad_input_matrix(client, method, path, kwargs, status, code, parameter):
    r = client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and body["detail"]
    assert body.get("parameter") == parameter


def test_every_v1_endpoint_is_covered_by_the_bad_input_matrix():
    covered = {p.split("?")[0] for _, p, *_ in BAD_INPUTS}
    for path in build_spec(make_service().options, board=True)["paths"]:
        if path.startswith("/v1/"):
            assert any(
                path == c or ("{" in path and c.startswith("/v1/devices/")) for c in covered
            ), path


AUTH_CALLS = [
    ("GET", ONE.format(d="dev-1"), {}),
    ("GET", "/v1/predictions?ids=a", {}),
    ("GET", "/v1/stream?ids=a", {}),
    ("POST", "/v1/prefetch", {"json": {"device_ids": ["a"]}}),
    ("POST", "/v1/beacon", {"json": {"timings": [{"input_to_shown_ms": 1, "network_ms": 1}]}}),
    ("GET", "/v1/board/fleet", {}),
    ("GET", "/v1/board/panel", {}),
    ("GET", "/v1/board/stream", {}),
]


TOKEN = "pct_unit-test-token-0123456789abcdef"
SCOPE_OF_CALL = {
    "/v1/prefetch": "prefetch",
    "/v1/beacon": "prefetch",
    "/v1/board/fleet": "board",
    "/v1/board/panel": "board",
    "/v1/board/stream": "board",
}


@pytest.mark.parametrize("method, path, kwargs", AUTH_CALLS, ids=[p for _, p, _ in AUTH_CALLS])
def test_bearer_token_guards_every_v1_endpoint(method, path, kwargs):
    client = TestClient(make_app(make_service(auth_token=TOKEN)))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        r = client.request(method, path, headers=headers, **kwargs)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")
    if "stream" not in path:  # an accepted stream never ends; tested over HTTP elsewhere
        r = client.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"}, **kwargs)
        assert r.status_code < 300


@pytest.mark.parametrize("method, path, kwargs", AUTH_CALLS, ids=[p for _, p, _ in AUTH_CALLS])
def test_each_named_token_may_do_only_what_its_scopes_say(method, path, kwargs, tmp_path):
    from precast.tokens import line_for, new_token

    tokens = {scope: new_token() for scope in ("read", "prefetch", "board")}
    path_file = tmp_path / "tokens"
    path_file.write_text(
        "".join(line_for(f"t-{s}", frozenset({s}), t) + "\n" for s, t in tokens.items())
    )
    client = TestClient(make_app(make_service(tokens_file=path_file)))
    needed = SCOPE_OF_CALL.get(path.split("?")[0], "read")
    for scope, token in tokens.items():
        if scope == needed and "stream" in path:
            continue  # an accepted stream never ends
        r = client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)
        if scope == needed:
            assert r.status_code < 300, (scope, r.text)
        else:
            assert r.status_code == 403 and r.json()["error"] == "forbidden", (scope, r.text)
            assert f'scope="{needed}"' in r.headers["www-authenticate"]
    assert not any(t in path_file.read_text() for t in tokens.values())


def test_tokens_rotate_without_a_restart(tmp_path):
    from consumer_api.app import reload_tokens
    from precast.tokens import line_for, new_token

    old, new = new_token(), new_token()
    f = tmp_path / "tokens"
    f.write_text(line_for("ui", frozenset({"read"}), old) + "\n")
    svc = make_service(tokens_file=f)
    client = TestClient(make_app(svc))
    get = lambda t: client.get("/v1/predictions?ids=a", headers={"Authorization": f"Bearer {t}"})  # noqa: E731
    assert get(old).status_code == 200 and get(new).status_code == 401
    f.write_text(line_for("ui-2", frozenset({"read"}), new) + "\n")
    reload_tokens(svc)  # what the API does every second (and on SIGHUP)
    assert get(new).status_code == 200 and get(old).status_code == 401
    f.write_text("garbage that is not a token line\n")
    reload_tokens(svc)  # a broken file keeps the last good tokens
    assert get(new).status_code == 200


def test_probes_need_no_token():
    client = TestClient(make_app(make_service(auth_token=TOKEN)))
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert client.get(path).status_code == 200


def test_body_is_the_stored_bytes_plus_serving_fields(svc, client):
    e = prediction("dev-1", now_ms() - 100)
    svc.view.put_if_newer("dev-1", e)
    served = client.get(ONE.format(d="dev-1")).content
    assert served.startswith(e.body[:-1])
    assert set(orjson.loads(served)) - set(orjson.loads(e.body)) == {
        "source",
        "age_ms",
        "delay_origin",
    }


@given(
    st.integers(0, 5_000),
    st.integers(-50, 5_000),
    st.integers(-50, 5_000),
    st.integers(0, 100_000),
    st.one_of(st.none(), st.integers(0, 3_000)),
)
def test_hot_path_rendering_matches_the_documented_segments(
    queue, kafka, horizon_extra, cache, inference
):
    # answers.fresh (the hot path) against segments/origin (the reference used everywhere else)
    computed = 1_800_000_000_000
    produced = computed + queue + (inference or 0)
    received = produced + kafka
    now = received + cache
    e = prediction(
        "dev-1",
        computed,
        produced=produced,
        received=received,
        inference_ms=inference,
        horizon_ms=200_000 + horizon_extra,
    )
    body, headers, etag, max_age = fresh("dev-1", e, now)
    seg = segments(e, now)
    doc = orjson.loads(body)
    assert doc["source"] == "precomputed" and doc["age_ms"] == now - computed
    assert doc["delay_origin"] == origin(seg)
    h = dict(headers)
    assert h[b"server-timing"] == (
        b"age.queue;dur=%d, age.model;dur=%d, age.kafka;dur=%d, age.cache;dur=%d, "
        b"wait.read;dur=0.000, wait.db_lock;dur=0.000" % seg
    )
    timed = dict(fresh("dev-1", e, now, 1_234_567, 89_000)[1])[b"server-timing"]
    assert timed.endswith(b"wait.read;dur=1.234, wait.db_lock;dur=0.089")
    assert h[b"etag"] == etag == e.etag.encode() and h[b"x-model-version"] == b"1.0.0"
    assert h[b"surrogate-key"] == b"precast d:dev-1 mv:1.0.0 ml:1 ml:1.0 ml:1.0.0"
    assert (
        h[b"cache-control"] == b"max-age=%d" % max_age
        and max_age == (e.valid_until_ms - now) // 1000
    )


def test_every_read_is_counted_by_source(svc, client):
    def count(source: str) -> float:
        line = f'precast_api_reads_total{{source="{source}"}} '
        return float(
            next(x for x in client.get("/metrics").text.splitlines() if x.startswith(line)).split()[
                -1
            ]
        )

    svc.view.put_if_newer("dev-1", prediction("dev-1", now_ms() - 100))
    before = count("precomputed"), count("fallback")
    client.get(ONE.format(d="dev-1"))
    client.get(ONE.format(d="dev-404"))
    client.get("/v1/predictions", params={"ids": "dev-1,dev-404"})
    assert (count("precomputed"), count("fallback")) == (before[0] + 2, before[1] + 2)


def test_served_answers_match_the_models_the_openapi_document_is_generated_from():
    from consumer_api.read.contract import Answer, Batch, PrefetchResult

    svc = make_service(expired="stale", grace_s=600)
    now = now_ms()
    svc.view.put_if_newer("dev-1", prediction("dev-1", now - 100))
    svc.view.put_if_newer("dev-2", prediction("dev-2", now - 70_000, horizon_ms=5_000))
    client = TestClient(make_app(svc))
    sources = set()
    for d in ("dev-1", "dev-2", "dev-3"):
        sources.add(Answer.model_validate_json(client.get(ONE.format(d=d)).content).source)
    assert sources == {"precomputed", "stale", "fallback"}
    batch = Batch.model_validate_json(client.get("/v1/predictions?ids=dev-1,dev-3").content)
    assert [a.reason for a in batch.predictions] == [None, "unknown_device"]
    hint = client.post("/v1/prefetch", json={"device_ids": ["dev-3"]}).content
    assert PrefetchResult.model_validate_json(hint).unknown == 1


def test_the_bearer_scheme_is_declared_exactly_when_a_token_is_configured():
    open_doc = TestClient(make_app(make_service())).get("/openapi.json").json()
    assert open_doc["openapi"] == "3.2.0"
    assert "security" not in open_doc and "securitySchemes" not in open_doc["components"]
    ops = [op for item in open_doc["paths"].values() for op in item.values()]
    assert all(op.get("security") == [] for op in ops)
    assert not any("401" in op["responses"] or "403" in op["responses"] for op in ops)
    svc = make_service(auth_token=TOKEN)
    doc = TestClient(make_app(svc)).get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert all(doc["paths"][p]["get"]["security"] == [] for p in ("/healthz", "/metrics"))
    for path, item in doc["paths"].items():
        for op in item.values():
            if path.startswith("/v1/"):
                scope = SCOPE_OF_CALL.get(path, "board" if "/board/" in path else "read")
                assert op["security"] == [{"bearer": [scope]}], path
                assert {"401", "403"} <= set(op["responses"]), path
            else:
                assert op["security"] == [] and "401" not in op["responses"], path


def test_the_contract_literals_list_exactly_what_answers_render():
    from typing import get_args

    from consumer_api.read.answer import FALLBACK_REASONS, SEGMENTS
    from consumer_api.read.contract import DelayOrigin, FallbackReason

    assert set(get_args(DelayOrigin)) == {*SEGMENTS, "fallback"}
    assert set(get_args(FallbackReason)) == set(FALLBACK_REASONS)
