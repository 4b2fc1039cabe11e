"""Token rotation against a running `precast-api`: `precast api-token revoke --api` reports
that the API has taken the change only once the API serves the new file (its /healthz names
the file's generation), the revoked token is refused from then on, and a tokens file that is
deleted, or made unusable, never stops the reload: the API fails closed, or keeps its tokens,
and logs it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx2

from opsctl.stack.process import free_port
from precast.files import write_private
from precast.tokens import line_for, new_token
from tests.integration.api_helpers import wait_for


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "api-token", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_revoke_is_confirmed_by_the_running_api(kafka_settings, topics, tmp_path):
    f = tmp_path / "tokens"
    a, b = new_token(), new_token()
    f.write_text(
        line_for("a", frozenset({"read"}), a) + "\n" + line_for("b", frozenset({"read"}), b) + "\n"
    )
    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_REDIS__URL": "",
        "PRECAST_API__PORT": str(port),
        "PRECAST_API__TOKENS_FILE": str(f),
        "PRECAST_API__BOARD": "false",
        "PRECAST_LOG_LEVEL": "INFO",
    }
    log = tmp_path / "api.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer_api.cli"], env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"

    def get(token: str) -> int:
        return httpx2.get(
            url + "/v1/predictions?ids=x", headers={"Authorization": f"Bearer {token}"}, timeout=5
        ).status_code

    try:

        def ready() -> bool:
            try:
                return httpx2.get(url + "/readyz", timeout=1).status_code == 200
            except httpx2.TransportError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_for(ready, 60, 0.1, what="api ready")
        assert get(a) == 200 and get(b) == 200
        r = _cli("revoke", "a", "--file", str(f), "--api", url, "--wait", "10")
        assert r.returncode == 0 and "has taken it" in r.stdout, (r.stdout, r.stderr)
        assert get(a) == 401 and get(b) == 200  # confirmed means refused from now on
        # gone: no token from it is valid (fails closed); back: valid again
        text = f.read_text()
        f.unlink()
        wait_for(lambda: get(b) == 401, 10, 0.1, what="fails closed")
        write_private(f, text)
        wait_for(lambda: get(b) == 200, 10, 0.1, what="back")
        # not UTF-8: the previous tokens stay, the reload goes on
        write_private(f, b"\xff\xfe garbage\n")
        wait_for(lambda: "not UTF-8" in log.read_text(), 10, 0.1, what="logged")
        assert get(b) == 200
        write_private(f, text)  # and is taken again once the file is good
        wait_for(lambda: "read again after an error" in log.read_text(), 10, 0.1, what="again")
        assert proc.poll() is None
        assert httpx2.get(url + "/readyz", timeout=5).status_code == 200
        text = log.read_text()
        assert text.count("not UTF-8") == 1 and text.count("is gone") == 1
        assert "Traceback" not in text
        # only changes are logged: the revoke and the file's return, not a line a second
        assert text.count("tokens file re-read") == 2, text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
