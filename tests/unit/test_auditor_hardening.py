"""The auditor against hostile clients and lost keys: every bad query parameter is a 400 naming
it, bodies and unknown paths or methods get JSON refusals, health says what is down without
the exception's text; a log is bound to its signing key: a missing key for an existing log is an
error (never a new key), another key is refused, and an older log binds only to the key that
signed it."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from auditor.api import create_app
from auditor.cli import build
from auditor.settings import AuditorSettings
from precast.audit.checkpoint import Checkpoint, Signer
from precast.audit.store import LogStore
from precast.errors import ConfigError
from tests.unit.test_audit_log import ORIGIN, records
from tests.unit.test_audit_log import build as build_log


@pytest.fixture
def client(tmp_path):
    signer = Signer.generate(ORIGIN)
    build_log(tmp_path, signer, records(30)).close()
    store = LogStore(tmp_path / "log.db", readonly=True)
    app = create_app(store, lambda: (False, {"down": ["appender"]}), lambda: (True, {}))
    with TestClient(app) as c:
        yield c
    store.close()


@pytest.mark.parametrize(
    "query, parameter",
    [
        ("/v1/checkpoint?size=abc", "size"),
        ("/v1/checkpoint?size=-1", "size"),
        ("/v1/checkpoint?size=+5", "size"),
        ("/v1/checkpoint?size=%205", "size"),
        ("/v1/checkpoint?size=%D9%A5", "size"),  # an Arabic-Indic five: int() takes it
        ("/v1/checkpoint?size=99999999999999999999", "size"),  # past SQLite's 63 bits
        ("/v1/checkpoint?size=1&size=2", "size"),
        ("/v1/checkpoint?sizes=1", "sizes"),
        ("/v1/proof/inclusion?partition=0", "partition"),
        ("/v1/proof/inclusion?partition=0&offset=1&device=dev-000&computed_at_ms=1", "partition"),
        ("/v1/proof/inclusion?device=bad%20id&computed_at_ms=1", "device"),
        ("/v1/proof/inclusion?device=dev-000&computed_at_ms=1e3", "computed_at_ms"),
        ("/v1/proof/inclusion?partition=0&offset=9223372036854775808", "offset"),
        ("/v1/proof/inclusion?partition=0&offset=1&tree_size=x", "tree_size"),
        ("/v1/proof/inclusion?partition=0&offset=1&extra=1", "extra"),
        ("/v1/proof/consistency", "first"),
        ("/v1/proof/consistency?first=", "first"),
        ("/v1/proof/consistency?first=1&second=two", "second"),
    ],
)
def test_every_bad_query_parameter_is_a_400_naming_it(client, query, parameter):
    r = client.get(query)
    assert r.status_code == 400, (query, r.status_code, r.text)
    assert r.json()["parameter"] == parameter


def test_good_queries_still_answer(client):
    assert client.get("/v1/checkpoint?size=10").status_code == 200
    assert client.get("/v1/proof/inclusion?partition=0&offset=0").status_code == 200
    assert client.get("/v1/proof/inclusion?device=dev-000&computed_at_ms=1000").status_code == 200
    assert client.get("/v1/proof/consistency?first=10&second=20").status_code == 200
    assert client.get("/v1/checkpoint?size=11").status_code == 404


def test_bodies_paths_methods_and_health_are_refused_in_json(client):
    r = client.request("GET", "/v1/checkpoint", content=b"x" * 10)
    assert r.status_code == 413 and r.json()["error"] == "body_not_allowed"
    r = client.get("/v1/checkpoint", headers={"transfer-encoding": "chunked"})
    assert r.status_code == 413
    r = client.get("/nope")
    assert r.status_code == 404 and r.json() == {"error": "not_found"}
    r = client.post("/v1/checkpoint")
    assert r.status_code == 405 and r.json() == {"error": "method_not_allowed"}
    assert client.get("/v1/checkpoint/").status_code == 404  # no redirect built from Host
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json() == {
        "status": "unavailable",
        "down": ["appender"],
    }


def _settings(tmp_path: Path) -> AuditorSettings:
    return AuditorSettings(
        kafka={"bootstrap_servers": "127.0.0.1:1"},
        audit={
            "db_path": tmp_path / "audit" / "log.db",
            "key_path": tmp_path / "audit" / "signing.key",
            "origin": ORIGIN,
        },
    )


def _close(built) -> None:
    built.reader.close()
    built.appender.store.close()


def test_a_log_is_bound_to_its_key(tmp_path):
    s = _settings(tmp_path)
    first = build(s, partitions=2)  # a new log: a new key, bound to it
    key_id = first.signer.verifier.key_id.hex()
    assert first.appender.store.meta("key_id") == key_id
    _close(first)
    again = build(s, partitions=2)  # the same key: fine
    assert again.signer.verifier.key_id.hex() == key_id
    _close(again)

    # another key at the key path: refused, the log keeps its key
    s.audit.key_path.write_text(Signer.generate(ORIGIN).encode() + "\n")
    with pytest.raises(ConfigError, match=f"signed by key {key_id}"):
        build(s, partitions=2)
    # no key at all: an error, never a fresh key for an existing log
    s.audit.key_path.unlink()
    with pytest.raises(ConfigError, match="signing key .* is missing"):
        build(s, partitions=2)
    assert not s.audit.key_path.exists()


def test_a_log_from_before_the_binding_binds_only_to_the_key_that_signed_it(tmp_path):
    s = _settings(tmp_path)
    signer = Signer.generate(ORIGIN)
    (tmp_path / "audit").mkdir()
    old = LogStore(s.audit.db_path)
    old.bind(ORIGIN, "precast.predictions")
    cp = Checkpoint(ORIGIN, 0, b"\0" * 32)
    old.add_checkpoint(0, cp.root, signer.sign(cp), 0)
    old.close()
    s.audit.key_path.write_text(Signer.generate(ORIGIN).encode() + "\n")
    with pytest.raises(ConfigError, match="not signed by key"):
        build(s, partitions=2)
    s.audit.key_path.write_text(signer.encode() + "\n")
    built = build(s, partitions=2)
    assert built.appender.store.meta("key_id") == signer.verifier.key_id.hex()
    _close(built)
