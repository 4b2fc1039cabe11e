"""A fleet precast was not written for, end to end against the real broker: the refrigerated
trailers of schemas/fleets/trailers.toml (`deviceId`, times in seconds, nested and flat readings,
alarm codes instead of severities, service tickets) through the simulator, the context
aggregator, a worker serving a LightGBM model, the read API and its board, the drift monitor and
a shadow run of a scikit-learn candidate — every process started with PRECAST_FLEET__SPEC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import orjson
import pytest

from opsctl.stack.process import free_port
from precast.fleet import load_fleet, snapshot
from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset
from schemas.leases import is_lease_key
from tests.integration.ops_support import precast
from tests.integration.worker_support import ROOT, spawn_worker, wait_ready

SPEC = ROOT / "schemas" / "fleets" / "trailers.toml"
MODELS = ROOT / "workers" / "models" / "reefer-service"
FLEET = load_fleet(SPEC)


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def _until(what: str, fn, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _read(kafka_settings, topic: str, partitions: int, group: str) -> list:
    c = Consumer(kafka_settings, group)
    try:
        ends = {p: c.watermarks(topic, p)[1] for p in range(partitions)}
        c.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, pos, deadline = [], {}, time.monotonic() + 20
        while any(pos.get(p, 0) < e for p, e in ends.items()) and time.monotonic() < deadline:
            for m in c.consume(2_000, 0.2):
                out.append(m)
                pos[m.partition()] = m.offset() + 1
        return out
    finally:
        c.close()


def _spawn(module: str, env: dict, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", module], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.mark.timeout(420)
def test_the_trailer_fleet_end_to_end(kafka_settings, topics, unique, tmp_path, admin):
    base = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.heartbeats.partitions),
        "PRECAST_FLEET__SPEC": str(SPEC),
        "PRECAST_LOG_LEVEL": "WARNING",
    }
    worker_port, drift_port, ctx_port, api_port = (free_port() for _ in range(4))
    log = (tmp_path / "procs.log").open("wb")
    app_id = unique("ctx")
    procs = [
        _spawn(
            "workers.drift.cli",
            {
                **base,
                "PRECAST_METRICS__PORT": str(drift_port),
                "PRECAST_DRIFT__MODEL_PATH": str(MODELS / "1.0.0"),
                "PRECAST_DRIFT__GROUP_ID": unique("drift"),
                "PRECAST_DRIFT__WINDOW_S": "30",
                "PRECAST_DRIFT__STEP_S": "2",
                "PRECAST_DRIFT__MIN_ROWS": "200",
            },
            log,
        ),
        _spawn(
            "workers.context.aggregator",
            {
                **base,
                "PRECAST_METRICS__PORT": str(ctx_port),
                "PRECAST_CONTEXT__APP_ID": app_id,
                "PRECAST_CONTEXT__DATA_DIR": str(tmp_path / "faust"),
            },
            log,
        ),
        _spawn("consumer_api.cli", {**base, "PRECAST_API__PORT": str(api_port)}, log),
    ]
    worker = spawn_worker(
        kafka_settings,
        topics,
        unique("workers"),
        tmp_path / "worker.log",
        PRECAST_FLEET__SPEC=str(SPEC),
        PRECAST_MODEL__PATH=str(MODELS / "1.0.0"),
        PRECAST_METRICS__PORT=str(worker_port),
        PRECAST_LOG_LEVEL="WARNING",
    )
    procs.append(worker)
    try:
        wait_ready(worker_port, timeout=90)
        _until("the API", lambda: _get(api_port, "/readyz")[0] == 200)
        _until("the drift monitor", lambda: _get(drift_port, "/readyz")[0] == 200)
        time.sleep(2)  # the drift monitor starts at the end of the heartbeats topic
        sim = subprocess.run(
            [
                sys.executable,
                "-m",
                "producers.cli",
                *("--devices", "60", "--count", "2400", "--rate", "800", "--seed", "5"),
                # one heartbeat per trailer every 0.05 s of wall time, each round 30 simulated s
                *("--hb-interval", "0.05", "--speedup", "600", "--run-id", "trl"),
            ],
            env=base,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sim.returncode == 0, sim.stderr

        # predictions: the trailer labels, two candidates each (the spec's top_k), lineage
        def predictions():
            msgs = _read(
                kafka_settings,
                topics.predictions.name,
                topics.predictions.partitions,
                unique("chk"),
            )
            docs = [orjson.loads(m.value()) for m in msgs if not is_lease_key(m.key())]
            return docs if len({d["device_id"] for d in docs}) >= 50 else None

        docs = _until("predictions of most trailers", predictions)
        labels = set(FLEET.spec.labels)
        for d in docs:
            assert d["model_version"] == "1.0.0" and len(d["candidates"]) == 2
            assert {c["strategy"] for c in d["candidates"]} <= labels
            assert d["valid_until_ms"] - d["computed_at_ms"] == 60_000  # the spec's horizon
            assert d["lineage"] and all(
                r["topic"].startswith(base["PRECAST_TOPICS__PREFIX"]) for r in d["lineage"]
            )
        assert {d["trigger"] for d in docs} >= {"heartbeat", "alarm"}  # alarm codes trigger

        # the read API serves them
        device = docs[-1]["device_id"]
        status, body = _until(
            "an answer",
            lambda: (r := _get(api_port, f"/v1/devices/{device}/prediction"))[0] == 200 and r,
        )
        answer = orjson.loads(body)
        assert answer["device_id"] == device and answer["candidates"][0]["strategy"] in labels

        # its board shows the trailer spec's columns, filters and alarm states
        def board():
            status, body = _get(api_port, "/v1/board/fleet?limit=500")
            doc = orjson.loads(body) if status == 200 else {}
            return doc if doc.get("total", 0) >= 50 else None

        doc = _until("the board's rows", board)
        cols, layout = doc["columns"], doc["layout"]
        assert [c for c in cols if c in FLEET.spec.board.columns] == list(FLEET.spec.board.columns)
        assert [f["name"] for f in layout["filters"]][:3] == [
            "depot",
            "trailer_model",
            "power_mode",
        ]
        assert "site" not in cols and "open_work_orders" not in cols
        assert set(doc["facets"]["trailer_model"]) <= {"R1", "R2", "R3"} and doc["facets"]["depot"]
        alarm = cols.index("alarm")
        assert {r[alarm] for r in doc["rows"]} <= {"excursion", "door", "none"}
        depot = cols.index("depot")
        status, body = _get(api_port, f"/v1/board/fleet?depot={doc['rows'][0][depot]}")
        assert status == 200 and {r[depot] for r in orjson.loads(body)["rows"]} == {
            doc["rows"][0][depot]
        }

        # the context aggregator's snapshots are the trailer spec's
        snaps = _read(
            kafka_settings,
            topics.device_context.name,
            topics.device_context.partitions,
            unique("ctx"),
        )
        parsed = [snapshot.from_json(FLEET.context, m.value()) for m in snaps if m.value()]
        assert parsed and any(any(g for g in s.windows) for s in parsed)

        # the drift monitor tests the trailer features against the model's reference
        def drift_rows():
            _, text = _get(drift_port, "/metrics")
            return b'precast_drift_window_rows{feature="compressor_a"}' in text and text

        text = _until("a drift window", drift_rows).decode()
        assert 'feature="trailer_model=R2"' in text and 'feature="excursions_6h"' not in text
    except BaseException:
        log.flush()
        print((tmp_path / "procs.log").read_text()[-4_000:])
        raise
    finally:
        _stop(procs)
        log.close()
        admin.delete_topics([n for n in admin.topic_partitions() if app_id in n])

    # a shadow run of the scikit-learn candidate, grouped by the spec's board filters
    out = precast(
        {**base, "PRECAST_MODEL__REGISTRY": str(MODELS), "PRECAST_MODEL__PROVIDER": "cpu"},
        "shadow",
        "--live",
        "1.0.0",
        "--candidate",
        "1.1.0",
        "--offsets",
        "*:0-",
        "--json",
        "--no-progress",
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    c = json.loads(out.stdout)["comparison"]
    assert c["overall"]["predictions"] > 0 and c["groups"] == [
        "depot",
        "trailer_model",
        "power_mode",
        "trigger",
    ]
    assert set(c["by"]["trailer_model"]) <= {"R1", "R2", "R3", "unknown"} and c["by"]["depot"]
