"""The auditor as a real process against the real broker: every predictions record becomes
exactly one leaf (also across a kill -9), checkpoints are signed, stored and mirrored to the
checkpoints topic, the HTTP API and `precast audit` prove and verify, and a tampered log fails
`precast audit verify` naming the leaf."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from opsctl.stack.process import free_port
from precast.audit.answers import check_inclusion
from precast.audit.checkpoint import Verifier
from precast.kafka import Producer
from tests.integration.api_helpers import prediction_value, wait_for
from tests.integration.ops_support import ROOT, precast, read_all


@pytest.fixture
def audit_env(kafka_settings, topics, tmp_path, unique):
    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_AUDIT__DB_PATH": str(tmp_path / "audit" / "log.db"),
        "PRECAST_AUDIT__KEY_PATH": str(tmp_path / "audit" / "signing.key"),
        "PRECAST_AUDIT__PUBLIC_KEY": str(tmp_path / "audit" / "signing.key.pub"),
        "PRECAST_AUDIT__ORIGIN": unique("test.local/audit"),
        "PRECAST_AUDIT__PORT": str(port),
        "PRECAST_AUDIT__GROUP_ID": unique("auditor"),
        "PRECAST_AUDIT__CHECKPOINT_INTERVAL_S": "0.2",
    }
    env["URL"] = f"http://127.0.0.1:{port}"
    return env


def start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "auditor"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def get(url: str, accept: str = "application/json") -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def signed_size(env: dict[str, str], proc: subprocess.Popen | None = None) -> int:
    if proc is not None and proc.poll() is not None:
        raise AssertionError(f"the auditor exited: {proc.stderr.read() if proc.stderr else ''}")
    status, body = get(env["URL"] + "/v1/checkpoint")
    return json.loads(body)["size"] if status == 200 else -1


def publish(kafka, topic: str, n: int, start_at: int = 0) -> None:
    p = Producer(kafka)
    for i in range(start_at, start_at + n):
        dev = f"dev-{i % 25:03d}"
        p.produce(topic, dev.encode(), prediction_value(dev, 1_000_000 + i, 1_000_100 + i))
    p.flush()


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    """Signal the auditor, wait for it, and return what it wrote to stderr."""
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.communicate(timeout=30)[1]


def test_auditor_logs_proves_and_verifies(kafka_settings, topics, audit_env, tmp_path):
    env = audit_env
    publish(kafka_settings, topics.predictions.name, 120)
    p = Producer(kafka_settings)
    p.produce(topics.predictions.name, b"dev-001", None)  # tombstone
    p.produce(topics.predictions.name, b"dev-002", b"{not json")  # unreadable
    p.produce(
        topics.predictions.name,
        b"dev-003",
        prediction_value("dev-003", 2_000_000, 2_000_001, purge=True),
    )
    p.flush()
    proc = start(env)
    try:
        wait_for(lambda: signed_size(env, proc) == 123, timeout=60, what="123 leaves signed")
        verifier = Verifier.parse(Path(env["PRECAST_AUDIT__PUBLIC_KEY"]).read_text())

        # HTTP: the checkpoint as a signed note, proofs, bad input, probes, metrics.
        status, note = get(env["URL"] + "/v1/checkpoint", accept="text/plain")
        assert status == 200 and note.decode().startswith(env["PRECAST_AUDIT__ORIGIN"] + "\n123\n")
        status, body = get(env["URL"] + "/v1/proof/inclusion?device=dev-003&computed_at_ms=2000000")
        doc = json.loads(body)
        assert status == 200 and doc["leaf"]["trigger"] == "purge"
        assert check_inclusion(doc, verifier).size == 123
        status, body = get(env["URL"] + "/v1/proof/inclusion?partition=x&offset=1")
        assert status == 400 and "integer" in json.loads(body)["error"]
        status, body = get(env["URL"] + "/v1/proof/inclusion?partition=0&offset=99999")
        assert status == 404 and "no leaf" in json.loads(body)["error"]
        status, body = get(env["URL"] + "/v1/proof/consistency")
        assert status == 400 and "first" in json.loads(body)["error"]
        assert get(env["URL"] + "/healthz")[0] == 200
        assert get(env["URL"] + "/readyz")[0] == 200
        metrics = get(env["URL"] + "/metrics", accept="text/plain")[1].decode()
        assert 'precast_audit_leaves_total{kind="tombstone"} 1.0' in metrics
        assert 'precast_audit_leaves_total{kind="invalid"} 1.0' in metrics

        # The CLI, trusting only the public key.
        cli_env = {**env, "PRECAST_AUDIT__DB_PATH": env["PRECAST_AUDIT__DB_PATH"]}
        r = precast(cli_env, "audit", "checkpoint")
        assert r.returncode == 0, r.stderr
        assert "verified:" in r.stdout and "123 leaves" in r.stdout
        r = precast(cli_env, "audit", "checkpoint", "--topic")
        assert r.returncode == 0, r.stderr
        r = precast(
            cli_env, "audit", "prove", "--partition", "0", "--offset", "3", "--url", env["URL"]
        )
        assert r.returncode == 0, r.stderr
        assert "included: leaf" in r.stdout
        r = precast(cli_env, "audit", "prove", "--device", "dev-004", "--computed-at", "1000004")
        assert r.returncode == 0 and '"device": "dev-004"' in r.stdout.replace('":"', '": "')
        with closing(sqlite3.connect(env["PRECAST_AUDIT__DB_PATH"])) as db:
            first_size = db.execute("SELECT min(size) FROM checkpoints WHERE size > 0").fetchone()[
                0
            ]
        r = precast(cli_env, "audit", "prove", "--first", str(first_size), "--url", env["URL"])
        assert r.returncode == 0 and "consistent:" in r.stdout, r.stderr
        r = precast(cli_env, "audit", "prove", "--partition", "0")
        assert r.returncode == 2 and "go together" in r.stderr
        r = precast(cli_env, "audit", "verify")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "ok: every leaf" in r.stdout
    finally:
        err = stop(proc)
    assert proc.returncode == 0, err
    # A graceful stop folds the WAL back: the log is one self-contained file again.
    assert not Path(env["PRECAST_AUDIT__DB_PATH"] + "-wal").exists(), err

    # The checkpoint is mirrored, keyed by the log's origin.
    mirrored = [
        v
        for recs in read_all(kafka_settings, topics.audit_checkpoints.name).values()
        for _o, k, v, _h, _t in recs
    ]
    assert mirrored and json.loads(mirrored[-1])["note"].startswith(env["PRECAST_AUDIT__ORIGIN"])

    # Tampering with a copy: one flipped byte fails verify, naming the leaf.
    bad = tmp_path / "tampered.db"
    src = sqlite3.connect(env["PRECAST_AUDIT__DB_PATH"])
    db = sqlite3.connect(bad)
    src.backup(db)
    src.close()
    data = bytearray(db.execute("SELECT data FROM leaves WHERE idx = 42").fetchone()[0])
    data[30] ^= 0x01
    db.execute("UPDATE leaves SET data = ? WHERE idx = 42", (bytes(data),))
    db.commit()
    db.close()
    r = precast({**env, "PRECAST_AUDIT__DB_PATH": str(bad)}, "audit", "verify")
    assert r.returncode == 1
    assert "first bad leaf 42" in r.stderr and "leaf 42 was altered" in r.stdout


def test_kill_9_leaves_no_gap_and_no_duplicate(kafka_settings, topics, audit_env):
    env = audit_env
    total = 12_000
    done = threading.Event()

    def produce() -> None:
        for b in range(12):
            publish(kafka_settings, topics.predictions.name, 1_000, start_at=b * 1_000)
        done.set()

    writer = threading.Thread(target=produce)
    writer.start()
    proc = start(env)
    try:
        wait_for(lambda: signed_size(env, proc) > 1_000, timeout=60, what="a first checkpoint")
        stop(proc, signal.SIGKILL)
        assert proc.returncode == -signal.SIGKILL
        proc = start(env)
        writer.join(timeout=120)
        assert done.is_set()
        wait_for(lambda: signed_size(env, proc) == total, timeout=90, what=f"{total} leaves signed")
    finally:
        stop(proc)
    db = sqlite3.connect(env["PRECAST_AUDIT__DB_PATH"])
    rows = db.execute("SELECT part, off FROM leaves ORDER BY idx").fetchall()
    assert len(rows) == total == len(set(rows))  # no duplicate
    by_part: dict[int, list[int]] = {}
    for part, off in rows:
        by_part.setdefault(part, []).append(off)
    for offs in by_part.values():
        assert offs == list(range(len(offs)))  # no gap, topic order
    assert [i for (i,) in db.execute("SELECT idx FROM leaves ORDER BY idx")] == list(range(total))
    db.close()
    r = precast(env, "audit", "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_auditor_api_has_the_read_apis_limits(audit_env):
    """A silent socket is closed after the head deadline, a huge head gets 431, a body 413, and
    the auditor keeps answering; a log without its key is refused in one line."""
    import socket
    import time

    env = {**audit_env, "PRECAST_AUDIT__HEADER_TIMEOUT_S": "1"}
    proc = start(env)
    port = int(env["PRECAST_AUDIT__PORT"])
    try:
        wait_for(lambda: get(env["URL"] + "/healthz")[0] == 200, what="auditor up")
        silent = socket.create_connection(("127.0.0.1", port))
        silent.settimeout(10)
        t0 = time.monotonic()
        assert silent.recv(1) == b""  # closed by the server, not by our timeout
        assert time.monotonic() - t0 < 8
        big = socket.create_connection(("127.0.0.1", port))
        big.settimeout(10)
        big.sendall(b"GET /v1/checkpoint HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 80_000)
        assert big.recv(100).startswith(b"HTTP/1.1 431")
        body = socket.create_connection(("127.0.0.1", port))
        body.settimeout(10)
        body.sendall(b"GET /v1/checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        assert body.recv(100).startswith(b"HTTP/1.1 413")
        for s in (silent, big, body):
            s.close()
        assert get(env["URL"] + "/healthz")[0] == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    Path(env["PRECAST_AUDIT__KEY_PATH"]).unlink()
    again = subprocess.run(
        [sys.executable, "-m", "auditor"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "signing key" in again.stderr and "is missing" in again.stderr
