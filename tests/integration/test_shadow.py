"""`precast shadow` on the real broker: identical models agree fully, the shipped 1.0.0 and
1.1.0 agree exactly as much as an independent computation says, nothing reaches the live
topics or the serving store, the gate's exit code, and bad candidates fail in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import orjson
import redis
from onnx import TensorProto, helper

from opsctl.toolkit.ranges import format_time
from precast.fleet import load_fleet
from precast.fleet.simulate.truth import true_labels
from precast.kafka import Admin, Producer
from producers.simulator import Fleet
from tests.integration.ops_support import ROOT, cli_env, precast, read_all
from workers.model.inference import ModelSession
from workers.settings import DEFAULT_MODEL_DIR

REGISTRY = DEFAULT_MODEL_DIR.parent
# An hour ago, relative to now: record time = event time here, and records older than the
# heartbeats topic's 1-day retention would be deleted by the broker's retention check mid-test.
BASE_MS = (int(time.time()) - 3600) * 1000
METRICS = ("cpu_pct", "mem_pct", "temperature_c", "error_rate", "signal_quality", "uptime_s")


def _publish(kafka, topics, events: list, bad: int = 0) -> None:
    p = Producer(kafka)
    roles = {"heartbeat": "heartbeats", "work_order": "work_orders", "alarm": "alarms"}
    for e in events:
        topic = getattr(topics, roles[e["kind"]]).name
        p.produce(topic, e["device_id"].encode(), orjson.dumps(e), timestamp_ms=e["event_time_ms"])
    for i in range(bad):  # records the live worker dead-letters; a shadow run must not
        p.produce(
            topics.heartbeats.name, f"dev-bad-{i}".encode(), b"{not json", timestamp_ms=BASE_MS
        )
    p.flush()


def _env(kafka, topics, tmp_path: Path, redis_settings=None) -> dict[str, str]:
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    extra = {
        "PRECAST_TOPICS__PREFIX": prefix,
        "PRECAST_TOPICS__PARTITIONS": "3",
        "PRECAST_MODEL__PROVIDER": "cpu",
    }
    if redis_settings is not None:
        extra["PRECAST_REDIS__URL"] = redis_settings.url
        extra["PRECAST_REDIS__KEY_PREFIX"] = redis_settings.key_prefix
    return cli_env(kafka, tmp_path / "state", **extra)


def _count(kafka, topic: str) -> int:
    return sum(len(v) for v in read_all(kafka, topic).values())


def test_identical_models_agree_fully_and_nothing_reaches_live_topics(
    kafka_settings, redis_settings, topics, tmp_path
):
    fleet = Fleet(devices=120, seed=11, speedup=900)  # fast simulated time: alarms, work orders
    events = [e for r in range(4) for e in fleet.step(120, BASE_MS + r * 1000)]
    _publish(kafka_settings, topics, events, bad=7)
    env = _env(kafka_settings, topics, tmp_path, redis_settings)
    out = precast(
        env,
        "shadow",
        "--live",
        "1.0.0",
        "--candidate",
        "1.0.0",
        "--offsets",
        "*:0-",
        "--require-agreement",
        "1.0",
        "--require-top3-overlap",
        "1.0",
        "--report-dir",
        str(tmp_path / "report"),
        "--json",
        "--no-progress",
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    c = doc["comparison"]
    assert c["overall"]["predictions"] >= 120
    assert c["overall"]["top1_agreement"] == 1.0 and c["overall"]["top3_overlap"] == 1.0
    m = np.array(c["transitions"])
    assert m.sum() == c["overall"]["predictions"] and (m == np.diag(np.diag(m))).all()
    assert c["changed_devices"] == 0 and c["top_changes"] == []
    assert set(c["by"]["trigger"]) >= {"heartbeat"}
    assert c["rejected"] == {"not_json": 7}
    assert doc["gate"]["passed"] is True
    assert (tmp_path / "report" / "report.html").read_text().count("<table>") >= 5
    # Every compared prediction of the candidate is in the shadow topic; nothing elsewhere.
    shadow = read_all(kafka_settings, topics.shadow_predictions.name)
    assert sum(map(len, shadow.values())) == c["overall"]["predictions"]
    assert _count(kafka_settings, topics.predictions.name) == 0
    assert _count(kafka_settings, topics.dead_letters.name) == 0
    r = redis.Redis.from_url(redis_settings.url)
    assert r.keys(redis_settings.key_prefix + "*") == []


SPEC = load_fleet().spec
STRATEGIES = SPEC.labels
DEVICE_TYPES = SPEC.field("device_type").values
# the built-in spec's firmware_is_latest table, written out here (no feature code of precast's)
LATEST_FIRMWARE = {
    "gateway": "2.5.0",
    "camera": "6.0.0",
    "meter": "1.9.3",
    "pump_controller": "3.2.0",
}
NO_CONTEXT = (
    0.0,
    0.0,
    0.0,
    0.0,
    2160.0,
)  # open, open high, critical 1h, warning 1h, hours since WO


def _independent_top1(events: list[dict], folder: Path, context: list | None = None) -> np.ndarray:
    """Top-1 index of each heartbeat by the model alone: the built-in fleet's 16 features
    written out by hand from the raw canonical events and the given context values (none: the
    range holds heartbeats only), scores from ONNX Runtime directly."""
    rows = []
    for i, e in enumerate(events):
        m = e["metrics"]
        ctx = context[i] if context is not None else NO_CONTEXT
        rows.append(
            [
                *(float(m[k]) for k in METRICS[:5]),
                np.log1p(float(m["uptime_s"]) / 3600.0),
                1.0 if LATEST_FIRMWARE.get(e["device_type"]) == e["firmware"] else 0.0,
                *(1.0 if e["device_type"] == t else 0.0 for t in DEVICE_TYPES),
                *ctx[:4],
                np.log1p(ctx[4]),
            ]
        )
    scores = ModelSession(folder, provider="cpu").predict(np.array(rows, dtype=np.float32))
    return scores.argmax(axis=1)


def test_shipped_versions_agree_as_an_independent_computation_says(
    kafka_settings, topics, tmp_path
):
    devices, seed = 600, 21
    fleet = Fleet(devices=devices, seed=seed)
    events = fleet.heartbeats(devices, BASE_MS)  # one heartbeat per device: one prediction each
    _publish(kafka_settings, topics, events)
    live = _independent_top1(events, REGISTRY / "1.0.0")
    cand = _independent_top1(events, REGISTRY / "1.1.0")
    agree = int((live == cand).sum())
    assert 0 < agree < devices  # the shipped versions really differ somewhere

    env = _env(kafka_settings, topics, tmp_path)
    args = ["shadow", "--live", "1.0.0", "--candidate", "1.1.0", "--offsets", "*:0-"]
    args += ["--truth", f"{devices}:{seed}", "--json", "--no-progress"]
    out = precast(env, *args, timeout=180)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    c = doc["comparison"]
    assert c["overall"]["predictions"] == devices
    assert c["overall"]["agree"] == agree
    assert c["overall"]["top1_agreement"] == agree / devices
    assert c["changed_devices"] == devices - agree
    by_type = {
        t: int(((live == cand) & np.array([e["device_type"] == t for e in events])).sum())
        for t in DEVICE_TYPES
    }
    assert {t: v["agree"] for t, v in c["by"]["device_type"].items()} == by_type
    m = np.zeros((len(STRATEGIES), len(STRATEGIES)), dtype=int)
    np.add.at(m, (live, cand), 1)
    assert c["transitions"] == m.tolist()
    # Calibration: accuracy against the fleet's ground truth, drifting devices left out.
    truth = true_labels(SPEC, devices, seed)
    known = [i for i, e in enumerate(events) if truth[e["device_id"]] is not None]
    right = sum(STRATEGIES[cand[i]] == truth[events[i]["device_id"]] for i in known)
    cal = c["calibration"]["candidate"]
    assert cal["predictions"] == len(known) and cal["accuracy"] == right / len(known)
    # The shadow topic holds the candidate's answers.
    shadow = {
        orjson.loads(r[2])["device_id"]: orjson.loads(r[2])
        for recs in read_all(kafka_settings, topics.shadow_predictions.name).values()
        for r in recs
    }
    assert len(shadow) == devices
    assert all(
        shadow[e["device_id"]]["candidates"][0]["strategy"] == STRATEGIES[cand[i]]
        and shadow[e["device_id"]]["model_version"] == "1.1.0"
        for i, e in enumerate(events)
    )

    # The gate: a threshold above what was measured fails with exit 1, and says why.
    strict = precast(env, *args, "--require-agreement", "1.0", timeout=180)
    assert strict.returncode == 1, strict.stderr
    assert "shadow gate failed" in strict.stderr and "top-1 agreement" in strict.stderr
    loose = precast(
        env, *args, "--require-agreement", str(math.floor(agree / devices * 1e6) / 1e6), timeout=180
    )
    assert loose.returncode == 0, loose.stderr


def _wrong_shape_model(folder: Path) -> None:
    """A well-formed ONNX model that takes 5 features instead of the worker's 16."""
    x = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 5])
    y = helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", 6])
    w = helper.make_tensor("w", TensorProto.FLOAT, [5, 6], [0.1] * 30)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "w"], ["z"]),
            helper.make_node("Softmax", ["z"], ["probabilities"]),
        ],
        "wrong",
        [x],
        [y],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what the installed ONNX Runtime reads
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / "model.onnx"))
    manifest = json.loads((REGISTRY / "1.0.0" / "manifest.json").read_text())
    manifest.update(version="9.9.9", sha256=None)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_bad_candidate_is_one_line_and_exit_2(kafka_settings, topics, tmp_path):
    fleet = Fleet(devices=20, seed=2)
    _publish(kafka_settings, topics, fleet.heartbeats(20, BASE_MS))
    env = _env(kafka_settings, topics, tmp_path)
    missing = precast(env, "shadow", "--candidate", str(tmp_path / "nope"), "--offsets", "*:0-")
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.count("\n") == 1 and "candidate model not found" in missing.stderr
    unknown = precast(env, "shadow", "--candidate", "7.7.7", "--offsets", "*:0-")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1

    _wrong_shape_model(tmp_path / "wrong")
    shape = precast(env, "shadow", "--candidate", str(tmp_path / "wrong"), "--offsets", "*:0-")
    assert shape.returncode == 2, shape.stderr
    assert shape.stderr.count("\n") == 1 and "5 features" in shape.stderr
    assert _count(kafka_settings, topics.shadow_predictions.name) == 0


def test_gate_flags_are_checked_before_anything_runs(kafka_settings, topics, tmp_path):
    env = _env(kafka_settings, topics, tmp_path)
    bad = precast(
        env, "shadow", "--candidate", "1.1.0", "--offsets", "*:0-", "--require-agreement", "95"
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "between 0 and 1" in bad.stderr
    no_truth = precast(
        env, "shadow", "--candidate", "1.1.0", "--offsets", "*:0-", "--require-accuracy", "0.9"
    )
    assert no_truth.returncode == 2 and "need --truth" in no_truth.stderr


def test_a_killed_run_resumes_from_its_checkpoint(kafka_settings, topics, tmp_path):
    devices, rounds = 2_000, 30
    fleet = Fleet(devices=devices, seed=8)
    events = [e for r in range(rounds) for e in fleet.heartbeats(devices, BASE_MS + r * 1000)]
    _publish(kafka_settings, topics, events)
    hb = topics.heartbeats.name
    ends = Admin(kafka_settings).end_offsets([(hb, p) for p in range(3)])
    ranges = json.dumps({hb: [[p, 0, ends[(hb, p)]] for p in range(3)]})
    env = _env(kafka_settings, topics, tmp_path)
    cp, summary = tmp_path / "cp.json", tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "workers.shadow.run", "--live", "1.0.0", "--candidate", "1.1.0"]
    cmd += ["--ranges", ranges, "--summary", str(summary), "--checkpoint", str(cp)]
    cmd += ["--job", "j1", "--checkpoint-every", "0.05", "--all-triggers", "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
    mid = None
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            state = json.loads(cp.read_text())
        except (OSError, ValueError):
            continue
        done = sum(o for _t, _p, o in state["next"])
        if 0 < done < len(events) and state["comparison"]["overall"]["predictions"]:
            proc.kill()  # SIGKILL: no drain, no flush, no goodbye
            mid = state
            break
        time.sleep(0.01)
    proc.wait(30)
    assert mid is not None, "the run finished before a mid-run checkpoint was seen"
    assert not summary.exists()

    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "resumed" in out.stderr
    s = json.loads(summary.read_text())
    c = s["comparison"]
    assert s["resumes"] == 1 and s["records"] == len(events) and c["events"] == len(events)
    assert c["overall"]["predictions"] > mid["comparison"]["overall"]["predictions"]
    shadow = read_all(kafka_settings, topics.shadow_predictions.name)
    assert {orjson.loads(r[2])["device_id"] for v in shadow.values() for r in v} == set(fleet.ids)
    assert json.loads(cp.read_text())["complete"] is True
    # The same command once more: nothing to do, the summary stands.
    again = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "completed before" in again.stderr
    assert json.loads(summary.read_text())["comparison"] == c


def test_context_from_before_the_range_is_folded_in(kafka_settings, topics, tmp_path):
    """Work orders opened half an hour before the range count in the features, as they did for
    the live workers; without the look-back they would not."""
    devices, seed = 300, 13
    fleet = Fleet(devices=devices, seed=seed)
    opened = BASE_MS - 30 * 60_000
    orders = [
        {
            "schema_version": 1,
            "event_id": f"wo-{i}",
            "kind": "work_order",
            "device_id": d,
            "event_time_ms": opened,
            "produced_at_ms": opened,
            "work_order_id": f"WO-{i}",
            "status": "opened",
            "priority": "critical",
            "category": "hardware",
        }
        for i, d in enumerate(fleet.ids)
    ]
    heartbeats = fleet.heartbeats(devices, BASE_MS)
    _publish(kafka_settings, topics, orders + heartbeats)
    # one open critical work order, opened 30 minutes before each heartbeat (by hand)
    with_ctx = [(1.0, 1.0, 0.0, 0.0, 0.5) for _ in heartbeats]
    cand = _independent_top1(heartbeats, REGISTRY / "1.1.0", with_ctx)
    bare = _independent_top1(heartbeats, REGISTRY / "1.1.0")
    assert (cand != bare).any()  # the context changes answers: the test can tell

    env = _env(kafka_settings, topics, tmp_path)
    out = precast(
        env,
        "shadow",
        "--live",
        "1.0.0",
        "--candidate",
        "1.1.0",
        "--from",
        format_time(BASE_MS),
        "--to",
        format_time(BASE_MS + 60_000),
        "--json",
        "--no-progress",
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert "300 work orders and alarms before the range" in out.stderr
    assert json.loads(out.stdout)["comparison"]["overall"]["predictions"] == devices
    shadow = {
        orjson.loads(r[2])["device_id"]: orjson.loads(r[2])["candidates"][0]["strategy"]
        for recs in read_all(kafka_settings, topics.shadow_predictions.name).values()
        for r in recs
    }
    assert [shadow[e["device_id"]] for e in heartbeats] == [STRATEGIES[i] for i in cand]
