"""Nothing from a topic or a client reaches a header, a log line or an event frame unchecked, and
health says what is down without the exception's text: a client's path with a newline or an
ANSI escape is logged escaped; a record whose model version could break a header or an ETag is
refused; a record whose JSON holds raw line breaks is stored as one line; probes that fail say
"down" and nothing else."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

import orjson
import pytest
from starlette.testclient import TestClient

from consumer_api.edge.error_hygiene import ErrorHygiene
from precast.hygiene import printable
from precast.serving import InvalidPrediction, entry_from_prediction
from precast.telemetry.endpoints import ProbeServer

FORGED = "\n2026-01-01 00:00:00 ERROR precast.api: forged\x1b[2J\u2028"


def test_printable_escapes_what_could_forge_or_repaint_a_line():
    out = printable("a" + FORGED, 200)
    assert out.isascii() and out.isprintable()
    assert "\n" not in out and "\x1b" not in out and "\\x1b" in out and "\\u2028" in out
    assert printable("x" * 500, 10) == "x" * 10 + "..."


def test_a_clients_path_is_logged_escaped(caplog):
    async def boom(scope, receive, send):  # any path: the app fails after routing
        raise RuntimeError("internal")

    client = TestClient(ErrorHygiene(boom), raise_server_exceptions=False)
    with caplog.at_level(logging.INFO, logger="precast.api"):
        r = client.get("/x%0A2026-01-01%20ERROR%20forged%1B%5B2J")
    assert r.status_code == 500 and r.json()["error"] == "internal_error"
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "precast.api"]
    assert lines and all("\n" not in m and "\x1b" not in m for m in lines), lines
    assert any("\\x0a" in m or "\\n" in m for m in lines)


def _value(**overrides) -> bytes:
    doc = {
        "device_id": "dev-1",
        "candidates": [{"strategy": "monitor_only", "score": 0.9}],
        "model_version": "1.0.0",
        "computed_at_ms": 1_800_000_000_000,
        "valid_until_ms": 1_800_000_600_000,
        "produced_at_ms": 1_800_000_000_010,
        "trigger": "heartbeat",
    }
    doc.update(overrides)
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    "version", ['1.0"; x', "1.0 beta", "1.0\r\nX-Injected: 1", "1.0\x00", "1.0\\x", "v" * 129]
)
def test_a_model_version_that_could_break_a_header_or_etag_is_refused(version):
    with pytest.raises(InvalidPrediction) as exc:
        entry_from_prediction(_value(model_version=version), 0)
    assert exc.value.reason.value == "invalid"


def test_accepted_versions_still_are():
    for v in ("1.0.0", "2.0.0-rc.1+build.5", "é-1", "fleet/1.3"):
        assert entry_from_prediction(_value(model_version=v), 0).model_version == v


def test_json_with_raw_line_breaks_is_stored_as_one_line():
    raw = b'{\n"device_id": "dev-1",\r\n' + _value()[len(b'{"device_id":"dev-1",') :]
    assert orjson.loads(raw)["device_id"] == "dev-1"  # valid JSON, but two data: lines
    e = entry_from_prediction(raw, 0)
    assert b"\n" not in e.body and b"\r" not in e.body
    assert orjson.loads(e.body) == orjson.loads(raw)


def test_a_probe_that_fails_says_down_and_nothing_else():
    def broken():
        raise RuntimeError("Consumer closed at 10.0.0.7 with password hunter2")

    probe = ProbeServer("127.0.0.1", 0, health=broken).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{probe.port}/healthz", timeout=5)
        body = exc.value.read()
        assert exc.value.code == 503
        assert orjson.loads(body) == {"status": "unavailable", "down": ["probe"]}
    finally:
        probe.stop()


def test_api_health_names_the_materializer_not_its_error():
    from consumer_api.cli import build
    from consumer_api.settings import ApiSettings

    built = build(ApiSettings(kafka={"bootstrap_servers": "127.0.0.1:1"}, redis={"url": ""}))
    built.materializer.supervised.failure = RuntimeError("broker 10.0.0.7 refused user 'api'")
    ok, details = built.service.health()
    assert not ok and details == {"down": ["materializer"]}
