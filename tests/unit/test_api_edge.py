"""The read API's edge: per-client buckets keyed by the token's identity, the tokens file's
reload (survives any file, fails closed when it is gone, logs only changes, tells `revoke`
when it took a change), trusted proxies by CIDR range, and the Host allow-list."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from starlette.requests import Request
from starlette.testclient import TestClient

from consumer_api.app import TOKEN_RELOAD_ERRORS, reload_tokens
from consumer_api.edge.client_limits import ClientLimits
from consumer_api.edge.host_allowlist import allowed_names, host_name
from consumer_api.settings import ApiOptions
from precast.tokens import TokenTable, bearer, generation, line_for, new_token
from tests.api_fixtures import make_app, make_service


def _request(auth: bytes | None, peer: str = "10.0.0.7", xff: str | None = None) -> Request:
    headers = [(b"authorization", auth)] if auth is not None else []
    if xff is not None:
        headers.append((b"x-forwarded-for", xff.encode()))
    return Request({"type": "http", "headers": headers, "client": (peer, 5000)})


# -- buckets keyed by the token, however its header is spelled -------------------------------------
spellings = st.tuples(
    st.sampled_from(["Bearer", "bearer", "BEARER", "bEaReR"]),
    st.text(" \t", max_size=3),
    st.text(" \t", max_size=3),
)


@given(spellings)
def test_one_token_is_one_bucket_however_the_header_is_spelled(tmp_path_factory, spelling):
    scheme, before, after = spelling
    token = "pct_" + "k" * 40
    f = tmp_path_factory.getbasetemp() / "edge-tokens"
    f.write_text(line_for("ui", frozenset({"prefetch"}), token) + "\n")
    table = TokenTable(f)
    limits = ClientLimits(ApiOptions(client_key="token"), tokens=table)
    canonical = limits.keys(_request(f"Bearer {token}".encode()))
    header = f"{scheme} {before}{token}{after}".encode()
    assert table.lookup(header) is not None  # the lookup accepts it...
    assert limits.keys(_request(header)) == canonical  # ...and the bucket is the same one


def test_an_allowance_is_not_multiplied_by_respelling_the_header():
    token = new_token()
    svc = make_service(auth_token=token, client_key="token", client_beacons_per_s=0.001,
                       client_beacon_burst=2)  # fmt: skip
    client = TestClient(make_app(svc))
    body = {"timings": [{"input_to_shown_ms": 1, "network_ms": 1}]}
    codes = [
        client.post("/v1/beacon", json=body, headers={"Authorization": h}).status_code
        for h in (f"Bearer {token}", f"bearer {token}", f"BEARER  {token} ", f"Bearer\t{token}")
    ]
    # the tab is no Bearer scheme at all (401); the other three share one burst of two
    assert codes == [204, 204, 429, 401]


def test_bearer_normalizes_as_the_lookup_does():
    assert bearer(b"Bearer  abc ") == bearer(b"bearer abc") == b"abc"
    assert bearer(b"Basic abc") is None and bearer(b"Bearer   ") is None and bearer(None) is None


# -- the reload ------------------------------------------------------------------------------------
@pytest.fixture
def tokens_file(tmp_path):
    t = new_token()
    f = tmp_path / "tokens"
    f.write_text(line_for("ui", frozenset({"read"}), t) + "\n")
    return f, t


def _get(client: TestClient, token: str) -> int:
    return client.get(
        "/v1/predictions?ids=a", headers={"Authorization": f"Bearer {token}"}
    ).status_code


@pytest.mark.parametrize("breakage", ["not_utf8", "unreadable", "directory", "bad_line", "huge"])
def test_a_broken_tokens_file_keeps_the_table_logs_once_and_counts(
    tokens_file, breakage, caplog, monkeypatch
):
    f, t = tokens_file
    svc = make_service(tokens_file=f)
    client = TestClient(make_app(svc))
    assert _get(client, t) == 200
    if breakage == "not_utf8":
        f.write_bytes(b"ui read sha256:\xff\xfe\n")
    elif breakage == "unreadable":  # as chmod 0 would be for anyone but root

        def denied(self):
            raise PermissionError(13, "Permission denied")

        f.write_text(f.read_text() + "\n")  # changed, so that it is read again
        monkeypatch.setattr(type(f), "read_bytes", denied)
    elif breakage == "directory":
        f.unlink()
        f.mkdir()
    elif breakage == "bad_line":
        f.write_text("garbage\n")
    else:
        f.write_bytes(b"#" * (5 * 1024 * 1024))
    errors = TOKEN_RELOAD_ERRORS._value.get()
    with caplog.at_level(logging.INFO, "precast.api"):
        for _ in range(3):
            reload_tokens(svc)  # the task's every second
    assert _get(client, t) == 200  # the previous table stays
    lines = [r for r in caplog.records if "not re-read" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert TOKEN_RELOAD_ERRORS._value.get() - errors == 3
    assert svc.tokens.error is not None


def test_a_deleted_tokens_file_fails_closed_and_comes_back(tokens_file, caplog):
    f, t = tokens_file
    svc = make_service(tokens_file=f)
    client = TestClient(make_app(svc))
    text = f.read_text()
    f.unlink()
    with caplog.at_level(logging.INFO, "precast.api"):
        reload_tokens(svc)
        reload_tokens(svc)
    assert _get(client, t) == 401  # no token from a file that is gone
    assert sum("is gone" in r.getMessage() for r in caplog.records) == 1
    assert client.get("/healthz").json()["tokens"] == "absent"
    f.write_text(text)
    reload_tokens(svc)
    assert _get(client, t) == 200 and svc.tokens.error is None


def test_the_reload_logs_only_changes(tokens_file, caplog):
    f, t = tokens_file
    quiet = make_service()  # defaults: no tokens at all
    svc = make_service(tokens_file=f)
    with caplog.at_level(logging.INFO, "precast.api"):
        for _ in range(5):
            reload_tokens(quiet)
            reload_tokens(svc)
        assert not caplog.records
        os.utime(f, ns=(1, 1))  # touched, same tokens: nothing to say
        reload_tokens(svc)
        assert not caplog.records
        f.write_text(f.read_text() + line_for("ops", frozenset({"board"}), new_token()) + "\n")
        reload_tokens(svc)
    [line] = [r.getMessage() for r in caplog.records]
    assert "2 tokens" in line and "added ops" in line and t not in line


def test_healthz_names_the_tokens_file_it_serves_from(tokens_file):
    f, _ = tokens_file
    svc = make_service(tokens_file=f)
    client = TestClient(make_app(svc))
    assert client.get("/healthz").json()["tokens"] == generation(f.read_bytes())
    f.write_text("")
    reload_tokens(svc)
    assert client.get("/healthz").json()["tokens"] == generation(b"")


class _Api:
    """A stand-in for a running API's /healthz: re-reads the tokens file on every probe, or
    (stuck) never does."""

    def __init__(self, f, stuck: bool) -> None:
        table = TokenTable(f)

        class H(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if not stuck:
                    with contextlib.suppress(Exception):
                        table.reload()
                body = json.dumps({"status": "ok", "tokens": table.generation}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_revoke_says_whether_the_running_api_has_taken_it(tmp_path):
    f = tmp_path / "tokens"
    f.write_text(
        line_for("a", frozenset({"read"}), new_token()) + "\n"
        + line_for("b", frozenset({"read"}), new_token()) + "\n"
    )  # fmt: skip
    live, stuck = _Api(f, stuck=False), _Api(f, stuck=True)
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "opsctl.cli", "api-token", "revoke", *a, "--file", str(f)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    ok = run("a", "--api", live.url, "--wait", "5")
    assert ok.returncode == 0 and "has taken it" in ok.stdout, ok.stderr
    late = run("b", "--api", live.url, "--api", stuck.url, "--wait", "1")
    assert late.returncode == 1
    assert "has taken it" in late.stdout and "still serves" in late.stderr
    live.close()
    gone = run  # an API that does not answer: nothing confirms it
    f.write_text(line_for("c", frozenset({"read"}), new_token()) + "\n")
    r = gone("c", "--api", live.url, "--wait", "0.5")
    assert r.returncode == 1 and "no answer" in r.stderr
    stuck.close()


# -- trusted proxies by CIDR -----------------------------------------------------------------------
def test_forwarded_for_is_trusted_from_a_proxy_range_only():
    limits = ClientLimits(ApiOptions(trusted_proxies=["172.16.0.0/12", "fd00::/8", "10.0.0.1"]))

    def key(peer: str) -> str:
        return limits.keys(_request(None, peer, "6.6.6.6, 192.168.0.9"))[-1]

    assert key("172.18.0.5") == key("172.31.255.1") == "a:192.168.0.9"  # any container address
    assert key("fd12::3") == key("10.0.0.1") == key("::ffff:172.20.0.2") == "a:192.168.0.9"
    assert key("172.32.0.1") == "a:172.32.0.1" and key("10.0.0.2") == "a:10.0.0.2"
    assert key("testclient") == "a:testclient"  # not an address: never a proxy


def test_a_bad_proxy_range_is_a_config_error():
    with pytest.raises(ValidationError, match="not an address or CIDR range"):
        ApiOptions(trusted_proxies=["172.16.0.0/33"])


# -- the Host allow-list ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "host, ok",
    [("localhost", True), ("localhost:8000", True), ("LOCALHOST.", True), ("127.0.0.1:80", True),
     ("[::1]:8000", True), ("[::1]", True), ("attacker.example", False),
     ("attacker.example:8000", False), ("127.0.0.1.nip.io", False), ("", False)],
)  # fmt: skip
def test_the_api_answers_only_allowed_host_names(host, ok):
    client = TestClient(make_app(make_service()))
    for path in ("/v1/devices/dev-1/prediction", "/v1/predictions?ids=a", "/metrics",
                 "/v1/board/fleet", "/openapi.json"):  # fmt: skip
        r = client.get(path, headers={"host": host})
        if ok:
            assert r.status_code != 421, (host, path)
        else:
            assert r.status_code == 421 and r.json()["parameter"] == "Host", (host, path)
    # probes answer any Host (no data; orchestrators call them by address)
    assert client.get("/readyz", headers={"host": host}).status_code == 200


def test_the_allow_list_is_a_setting():
    client = TestClient(make_app(make_service(allowed_hosts=["api.example.org"])))
    assert (
        client.get("/v1/predictions?ids=a", headers={"host": "api.example.org:443"}).status_code
        == 200
    )
    assert client.get("/v1/predictions?ids=a", headers={"host": "localhost"}).status_code == 421
    anyone = TestClient(make_app(make_service(allowed_hosts=["*"])))
    assert anyone.get("/v1/predictions?ids=a", headers={"host": "x.example"}).status_code == 200
    for bad in ([], ["api.example.org:443"], ["http://x"]):
        with pytest.raises(ValidationError):
            ApiOptions(allowed_hosts=bad)


def test_host_names_without_ports():
    assert host_name(b"[::1]:8000") == "::1" and host_name(b"Example.ORG:1") == "example.org"


@pytest.mark.parametrize(
    "compose, nginx", [("docker-compose.yml", "nginx.conf"),
                       ("docker-compose.cluster.yml", "nginx-cluster.conf")],
)  # fmt: skip
def test_compose_allows_the_host_names_its_proxy_and_prometheus_use(compose, nginx):
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    env = yaml.safe_load((root / "compose" / compose).read_text())["services"]["api"]["environment"]
    names = allowed_names(ApiOptions(allowed_hosts=env["PRECAST_API__ALLOWED_HOSTS"],
                                     auth_token="pct_" + "x" * 40).allowed_hosts)  # fmt: skip
    assert names is not None and "evil.example" not in names
    conf = (root / "compose" / nginx).read_text()
    # the location / block sets no Host: nginx sends proxy_pass's host (or upstream's name)
    [upstream] = re.findall(r"location / \{[^}]*proxy_pass http://([^;/]+)", conf)
    assert host_name(upstream.encode()) in names
    prom = (root / "deploy" / "prometheus" / "prometheus.compose.yml").read_text()
    [target] = re.findall(
        r'job_name: precast-api\s+static_configs: \[\{ targets: \["([^"]+)"', prom
    )
    assert host_name(target.encode()) in names
