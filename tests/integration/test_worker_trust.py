"""Answers that survive a worker restart or a rebalance, and device clocks that cannot freeze
them, on the real broker with `precast-worker` processes:

- a clean restart (SIGTERM), then a precompute request: the new worker restores the device's
  state from the worker-state changelog and answers from the real heartbeat (same event time,
  same candidates), never from default features stamped with the request's time;
- a second worker joins and partitions move: the same holds on both members;
- a request for a device with no data publishes nothing (counted);
- a heartbeat from a clock 24 h ahead is dead-lettered (`future_event_time`), and the first
  real heartbeat after the clock is fixed is answered at once."""

from __future__ import annotations

import time
import urllib.request

import orjson

from opsctl.stack.process import free_port
from precast.kafka import Producer
from tests.integration.worker_support import read_predictions, spawn_worker, stop, wait_ready
from tests.worker_events import heartbeat, request

DEVICES = [f"trust-{i:02d}" for i in range(12)]  # spread over the 3 partitions


def _send(kafka_settings, topic: str, events: list[dict]) -> None:
    p = Producer(kafka_settings)
    for e in events:
        p.produce(topic, e["device_id"].encode(), orjson.dumps(e))
    p.flush()


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def _predictions(kafka_settings, topics, unique, until) -> list[dict]:
    return read_predictions(
        kafka_settings,
        topics.predictions.name,
        topics.predictions.partitions,
        unique("reader"),
        committed_only=False,
        until=until,
        timeout=60,
        quiet_s=1.0,
    )


def _by_trigger(preds: list[dict], trigger: str) -> dict[str, dict]:
    return {p["device_id"]: p for p in preds if p["trigger"] == trigger}


def _heartbeats(kafka_settings, topics, hb_t: int) -> None:
    _send(
        kafka_settings,
        topics.heartbeats.name,
        [heartbeat(d, hb_t, cpu_pct=90.0, error_rate=0.3) for d in DEVICES],
    )


def _requests(kafka_settings, topics, devices: list[str]) -> None:
    now = int(time.time() * 1000)
    _send(
        kafka_settings,
        topics.precompute_requests.name,
        [request(d, now, "prefetch") for d in devices],
    )


def _assert_real_answers(first: dict[str, dict], again: dict[str, dict], hb_t: int) -> None:
    assert set(again) == set(DEVICES)
    for d in DEVICES:
        assert again[d]["computed_at_ms"] == first[d]["computed_at_ms"] == hb_t, d
        assert again[d]["candidates"] == first[d]["candidates"], d
        assert again[d]["valid_until_ms"] == first[d]["valid_until_ms"], d
        # the answer from restored state names the heartbeat it was computed from
        beats = {(r["topic"], r["partition"], r["offset"]) for r in first[d]["lineage"]}
        named = {(r["topic"], r["partition"], r["offset"]) for r in again[d]["lineage"]}
        assert beats <= named and len(named) == len(beats) + 1, (d, again[d]["lineage"])


def test_restart_then_request_keeps_the_real_answer(kafka_settings, topics, unique, tmp_path):
    group, port = unique("workers"), free_port()
    # the ghost's request waits 2 s for data that never comes, then is counted and dropped
    env = {
        "PRECAST_METRICS__PORT": str(port),
        "PRECAST_WORKER__HORIZON_S": "600",
        "PRECAST_WORKER__REQUEST_WAIT_S": "2",
    }
    a = spawn_worker(kafka_settings, topics, group, tmp_path / "a.log", **env)
    b = None
    try:
        wait_ready(port)
        hb_t = int(time.time() * 1000) - 2_000
        _heartbeats(kafka_settings, topics, hb_t)
        preds = _predictions(
            kafka_settings, topics, unique, lambda ps: len(_by_trigger(ps, "heartbeat")) == 12
        )
        first = _by_trigger(preds, "heartbeat")
        assert stop(a) == 0  # SIGTERM: drain, flush, commit, exit 0
        b = spawn_worker(kafka_settings, topics, group, tmp_path / "b.log", **env)
        wait_ready(port)
        assert _metric(port, "precast_worker_state_restored_devices_total") == 12
        _requests(kafka_settings, topics, [*DEVICES, "trust-ghost"])
        preds = _predictions(
            kafka_settings, topics, unique, lambda ps: len(_by_trigger(ps, "prefetch")) >= 12
        )
        _assert_real_answers(first, _by_trigger(preds, "prefetch"), hb_t)
        assert "trust-ghost" not in {p["device_id"] for p in preds}
        deadline = time.monotonic() + 20
        while _metric(port, "precast_worker_requests_without_data_total") < 1:
            assert time.monotonic() < deadline, "the ghost's request was never given up"
            time.sleep(0.2)
        assert _metric(port, "precast_worker_requests_without_data_total") == 1
        assert _metric(port, "precast_worker_requests_awaiting_data") == 0
        preds = _predictions(kafka_settings, topics, unique, lambda ps: True)
        assert "trust-ghost" not in {p["device_id"] for p in preds}
        assert stop(b) == 0
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_rebalance_then_request_keeps_the_real_answer(kafka_settings, topics, unique, tmp_path):
    group, ports = unique("workers"), (free_port(), free_port())
    env = {"PRECAST_WORKER__HORIZON_S": "600"}
    a = spawn_worker(
        kafka_settings,
        topics,
        group,
        tmp_path / "a.log",
        PRECAST_METRICS__PORT=str(ports[0]),
        **env,
    )
    b = None
    try:
        # every input partition: 6 topics (events, requests, context, read hints) x 3
        assert wait_ready(ports[0])["assigned_partitions"] == 6 * 3
        hb_t = int(time.time() * 1000) - 2_000
        _heartbeats(kafka_settings, topics, hb_t)
        first = _by_trigger(
            _predictions(
                kafka_settings, topics, unique, lambda ps: len(_by_trigger(ps, "heartbeat")) == 12
            ),
            "heartbeat",
        )
        b = spawn_worker(
            kafka_settings,
            topics,
            group,
            tmp_path / "b.log",
            PRECAST_METRICS__PORT=str(ports[1]),
            **env,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # partitions moved: both members hold some
            ra, rb = wait_ready(ports[0]), wait_ready(ports[1])
            if 0 < ra["assigned_partitions"] < 15 and rb["assigned_partitions"] > 0:
                break
            time.sleep(0.3)
        moved = _metric(ports[1], "precast_worker_state_restored_devices_total")
        assert 0 < moved < 12  # the joining member restored the devices of what it gained
        _requests(kafka_settings, topics, DEVICES)
        preds = _predictions(
            kafka_settings, topics, unique, lambda ps: len(_by_trigger(ps, "prefetch")) >= 12
        )
        _assert_real_answers(first, _by_trigger(preds, "prefetch"), hb_t)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(30)


def test_a_clock_running_ahead_then_fixed(kafka_settings, topics, unique, tmp_path):
    group, port = unique("workers"), free_port()
    w = spawn_worker(
        kafka_settings, topics, group, tmp_path / "w.log", PRECAST_METRICS__PORT=str(port)
    )
    try:
        wait_ready(port)
        now = int(time.time() * 1000)
        ahead = heartbeat("trust-clock", now + 86_400_000)  # event and produced time: device's
        _send(kafka_settings, topics.heartbeats.name, [ahead])
        dead = _dead_letters(kafka_settings, topics, unique, 1)
        assert dead == [("trust-clock", "future_event_time")]
        fixed_t = int(time.time() * 1000)
        _send(kafka_settings, topics.heartbeats.name, [heartbeat("trust-clock", fixed_t)])
        preds = _predictions(kafka_settings, topics, unique, lambda ps: len(ps) >= 1)
        assert [p["computed_at_ms"] for p in preds] == [fixed_t]  # nothing from the future
        assert preds[0]["valid_until_ms"] < now + 86_400_000
    finally:
        stop(w)


def _dead_letters(kafka_settings, topics, unique, n: int) -> list[tuple[str, str]]:
    from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset

    c = Consumer(kafka_settings, unique("dlq"))
    c.assign(
        [TopicPartitionOffset(topics.dead_letters.name, p, OFFSET_BEGINNING) for p in range(3)]
    )
    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(100, 0.2):
            headers = dict(m.headers() or [])
            out.append((m.key().decode(), headers["dlq.reason"].decode()))
    c.close()
    return out
