"""The generated OpenAPI 3.2 document against a live `precast-api` process: schemathesis (`st run
--checks all`) finds no failure with every token setting: no token (loopback), one token with
every scope, and a tokens file whose token may only read (every other operation answers 403,
as the document says). Both event streams are fuzzed too: their frames are declared
(`itemSchema`) and schemathesis reads a few of them per case (schemathesis.toml below), in a
second run without the stateful phase (its scenarios would each wait out a stream)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from opsctl.stack.process import free_port
from precast.tokens import line_for, new_token
from tests.integration.api_helpers import prediction_value, publish, spawn_api

ST = Path(sys.executable).with_name("st")
# An event stream never ends: read at most a few frames, for at most 2 s, in fewer cases.
CONFIG = """
[[operations]]
include-path-regex = "stream$"
request-timeout = 2
max-stream-events = 4

[operations.generation]
max-examples = 8
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "setting",
    [
        # the default suite fuzzes the setting that checks most (bearer scopes on every
        # operation); the other two, ~30 s each, run with the slow scenarios
        pytest.param("open", marks=pytest.mark.slow),
        "env-token",
        pytest.param("read-only-file", marks=pytest.mark.slow),
    ],
)
def test_schemathesis_finds_no_failure(kafka_settings, topics, setting, tmp_path):
    now = int(time.time() * 1000)
    publish(  # a fresh answer and an expired one, so positive cases meet every source
        kafka_settings,
        topics.predictions.name,
        [
            ("dev-1", prediction_value("dev-1", now - 100, now - 50)),
            ("dev-2", prediction_value("dev-2", now - 700_000, now - 690_000)),
        ],
    )
    token = new_token()
    env: dict[str, str] = {}
    if setting == "env-token":
        env["PRECAST_API__AUTH_TOKEN"] = token
    elif setting == "read-only-file":
        (tmp_path / "tokens").write_text(line_for("reader", frozenset({"read"}), token) + "\n")
        env["PRECAST_API__TOKENS_FILE"] = str(tmp_path / "tokens")
    port = free_port()
    proc = spawn_api(kafka_settings, topics, port, **env)
    url = f"http://127.0.0.1:{port}"
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    try:
        doc = httpx2.get(url + "/openapi.json").json()
        assert doc["openapi"] == "3.2.0"
        assert ("securitySchemes" in doc["components"]) == (setting != "open")
        stream = doc["paths"]["/v1/stream"]["get"]["responses"]["200"]["content"]
        assert "itemSchema" in stream["text/event-stream"]
        base = [
            str(ST),
            "--config-file",
            str(tmp_path / "schemathesis.toml"),
            "run",
            url + "/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "40",
            "--seed",
            "11",
            "--request-timeout",
            "10",
        ]
        if setting != "open":
            base += ["-H", f"Authorization: Bearer {token}"]
        for only in (
            ["--exclude-path-regex", "stream$"],
            ["--include-path-regex", "stream$", "--phases", "examples,coverage,fuzzing"],
        ):
            run = subprocess.run(
                base + only, capture_output=True, text=True, timeout=150, cwd=tmp_path
            )
            out = run.stdout + run.stderr
            assert run.returncode == 0, out[-6000:]
            # (warnings are no failure: operations without example data; with the read-only
            # token, the operations that answer only 403, as the document says they do)
            assert re.search(r"\d+ passed", out) and not re.search(r"\d+ failed", out), out[-3000:]
            assert token not in out  # schemathesis sanitizes it; neither does the API echo it
    finally:
        proc.terminate()
        proc.wait(30)
