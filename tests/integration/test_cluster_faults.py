"""The fault suite on a private 3-broker KRaft cluster (RF 3, min.insync.replicas 2) with its own
Redis Cluster: a leader killed under load, the active controller and group coordinator killed
under load, a rolling restart, workers scaled 1 -> 3 -> 1, two API
replicas over Redis Cluster with one killed, a Redis master failed over, a broker frozen for 30 s.

Marked slow (`./dev test -m slow`). Rates are scaled to a shared 2-core machine (see RATE); the
point is correctness: 0 lost events, 0 lost triggers, 0 duplicates where promised. Each test
leaves the cluster whole again (every node up, every partition fully replicated).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import orjson
import pytest

from opsctl.stack.process import free_port
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from precast.redis_client import close as redis_close
from precast.redis_client import connect
from precast.serving import RedisStore
from precast.settings import RedisSettings
from tests.integration.api_helpers import prediction_value, publish, wait_for
from tests.integration.cluster_support import (
    PredictionTail,
    api_ready,
    busiest_leader,
    high_watermarks,
    led_by,
    sources,
    spawn_api,
)
from tests.integration.worker_support import (
    Load,
    assert_answered,
    input_offsets,
    lineage_refs,
    read_until_answered,
    spawn_worker,
    stop,
    wait_ready,
)
from tests.serving_cases import prediction

# Each scenario runs a load, a fault and then reads every prediction back for the lineage check:
# more than the suite-wide 180 s on 2 shared cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Events/s of this suite's mixed load (heartbeats, work orders, alarms, precompute requests, each
# drawn and encoded as it is sent). The 10k/s leader kill is `python -m bench cluster`,
# whose load cycles pre-encoded heartbeats; this suite checks correctness of every scenario and
# keeps the rate that fits beside them on 2 shared cores.
RATE = 3_000
DEVICES = 600


def _topic_names(topics) -> list[str]:
    return [t.name for t in topics]


def _workers(ks, topics, group, tmp_path, n, start=0, **env: str):
    procs, ports = [], []
    for i in range(start, start + n):
        port = free_port()
        procs.append(
            spawn_worker(
                ks,
                topics,
                group,
                tmp_path / f"worker-{i}.log",
                PRECAST_METRICS__PORT=str(port),
                PRECAST_TOPICS__REPLICATION_FACTOR="3",
                **env,
            )
        )
        ports.append(port)
    for port in ports:
        wait_ready(port, timeout=120)
    return procs


def _no_lost_event_or_trigger(ks, topics, load, unique) -> tuple[set, list[dict]]:
    assert load.error is None, load.error
    assert load.p.failed_total == 0  # every send acknowledged by two in-sync replicas
    expected = input_offsets(ks, topics, unique("probe"))
    # 0 lost events, and no duplicate (idempotent producer): each topic holds exactly what was
    # sent; a read API under test may add its own precompute requests on misses.
    on_topic = Counter(t for t, _, _ in expected)
    asks = topics.precompute_requests.name
    assert {t: n for t, n in on_topic.items() if t != asks} == {
        t: n for t, n in load.sent_to.items() if t != asks
    }
    assert on_topic[asks] >= load.sent_to[asks]
    expected, requests, preds = read_until_answered(
        ks, topics, expected, unique("reader"), committed_only=False, timeout=180
    )
    assert_answered(expected, requests, set(lineage_refs(preds)))
    return expected, preds


def _kill_all(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_leader_kill_9_under_load_loses_nothing_and_recovers(
    kafka_cluster, cluster_kafka_settings, cluster_admin, cluster_topics, unique, tmp_path
):
    ks, topics, admin = cluster_kafka_settings, cluster_topics, cluster_admin
    workers = _workers(ks, topics, unique("workers"), tmp_path, 2)
    hb = topics.heartbeats
    victim = None
    try:
        load = Load(ks, topics, devices=DEVICES, rate=RATE, seconds=25.0)
        load.start()
        time.sleep(6.0)
        marks = high_watermarks(ks, hb.name, hb.partitions, unique("marks"))
        victim_id = busiest_leader(admin, marks, hb.name)
        affected = led_by(admin, [hb.name, topics.predictions.name], victim_id)
        tail = PredictionTail(ks, topics.predictions.name, hb.name, hb.partitions)
        tail.start()
        time.sleep(0.5)
        tail.marks = high_watermarks(ks, hb.name, hb.partitions, unique("marks"))
        victim = kafka_cluster.brokers[victim_id - 1]
        killed_at = tail.armed = time.monotonic()
        victim.stop(hard=True)  # kill -9
        recovery_s = tail.wait_flowing(affected, timeout=60) - killed_at
        flowing = tail.count
        victim.start()
        victim.wait_ready(120)
        load.join(120)
        tail.stop()
        expected, preds = _no_lost_event_or_trigger(ks, topics, load, unique)
        assert flowing > 0  # answers kept coming while the leader was gone
        print(
            f"\nkilled broker {victim_id} (leader of partitions {sorted(affected)}); "
            f"{len(expected)} events at {RATE}/s, 0 lost; predictions flowed again on every "
            f"affected partition after {recovery_s:.1f}s"
        )
        # The target. About 4 s with the stack's 3 s broker session timeout and the
        # clients' 500 ms metadata refresh (docs/cluster.md, "Failover time"); Kafka's default
        # 9 s session timeout alone would use most of it.
        assert recovery_s < 10
        for w in workers:
            assert stop(w) == 0
    finally:
        _kill_all(workers)
        if victim is not None and not victim.running():
            victim.start()
            victim.wait_ready(120)
    admin.wait_fully_replicated(_topic_names(topics), 3, timeout=120)


def test_active_controller_and_group_coordinator_killed_answers_resume_within_10s(
    kafka_cluster, cluster_kafka_settings, cluster_admin, cluster_topics, unique, tmp_path
):
    """The slow case of issue 36: kill -9 of the node that is the active KRaft controller, the
    workers' group coordinator and the leader of some partitions at once. A new controller is
    elected before it can fence the dead node, so leaders move 5-6 s after the kill; answers
    must still resume on every partition within 10 s (they stopped for up to 90 s while a
    worker's commit waited on outputs for a partition without a leader)."""
    from bench.support.parts.cluster_groups import group_led_by
    from bench.support.parts.cluster_procs import active_controller

    ks, topics, admin = cluster_kafka_settings, cluster_topics, cluster_admin
    hb = topics.heartbeats
    controller = active_controller(kafka_cluster)
    assert controller is not None
    group = group_led_by(ks, admin, unique("workers"), controller)
    workers = _workers(ks, topics, group, tmp_path, 2)
    victim = kafka_cluster.brokers[controller - 1]
    try:
        load = Load(ks, topics, devices=DEVICES, rate=RATE, seconds=25.0)
        load.start()
        time.sleep(6.0)
        tail = PredictionTail(ks, topics.predictions.name, hb.name, hb.partitions)
        tail.start()
        time.sleep(0.5)
        tail.marks = high_watermarks(ks, hb.name, hb.partitions, unique("marks"))
        killed_at = tail.armed = time.monotonic()
        victim.stop(hard=True)  # kill -9: controller, coordinator and leader at once
        recovery_s = tail.wait_flowing(set(range(hb.partitions)), timeout=60) - killed_at
        victim.start()
        victim.wait_ready(120)
        load.join(120)
        tail.stop()
        expected, _ = _no_lost_event_or_trigger(ks, topics, load, unique)
        print(
            f"\nkilled broker {controller} (active controller, group coordinator); "
            f"{len(expected)} events, 0 lost; answers on every partition after {recovery_s:.1f}s"
        )
        assert recovery_s < 10, f"answers resumed on every partition only after {recovery_s:.1f}s"
        for w in workers:
            assert stop(w) == 0
    finally:
        _kill_all(workers)
        if not victim.running():
            victim.start()
            victim.wait_ready(120)
    admin.wait_fully_replicated(_topic_names(topics), 3, timeout=120)


def test_rolling_restart_of_all_three_brokers_under_load(
    kafka_cluster, cluster_kafka_settings, cluster_admin, cluster_topics, unique, tmp_path
):
    ks, topics, admin = cluster_kafka_settings, cluster_topics, cluster_admin
    workers = _workers(ks, topics, unique("workers"), tmp_path, 2)
    try:
        load = Load(ks, topics, devices=DEVICES, rate=RATE // 2, seconds=600.0)
        load.start()
        time.sleep(3.0)
        for node in kafka_cluster.brokers:  # one at a time, each back in sync before the next
            assert node.stop()  # SIGTERM: controlled shutdown moves leadership away first
            node.start()
            node.wait_ready(120)
            admin.wait_fully_replicated(_topic_names(topics), 3, timeout=180)
        load.seconds = 0  # stop the load now
        load.join(60)
        expected, _ = _no_lost_event_or_trigger(ks, topics, load, unique)
        print(f"\nrolling restart of 3 brokers: {len(expected)} events, 0 lost, 0 lost triggers")
        for w in workers:
            assert stop(w) == 0
    finally:
        _kill_all(workers)


def test_workers_scale_1_3_1_under_load_lose_no_trigger_and_answers_keep_data(
    kafka_cluster, cluster_kafka_settings, cluster_topics, unique, tmp_path
):
    from starlette.testclient import TestClient

    from consumer_api.cli import build
    from tests.integration.api_helpers import api_settings

    ks, topics = cluster_kafka_settings, cluster_topics
    group = unique("workers")
    # The load's event times run up to a minute behind the clock (1 ms per record, started in
    # the past so that none is in the future); with the 5 s default horizon every answer would
    # be expired on arrival and the API would never hold one. The test is about answers that
    # keep their data while partitions move, so they stay valid for 10 minutes here.
    horizon = {"PRECAST_WORKER__HORIZON_S": "600"}
    first = _workers(ks, topics, group, tmp_path, 1, **horizon)
    extra: list = []
    built = build(api_settings(ks, topics))  # local view, fed by its own materializer
    built.materializer.start()
    devices = [f"dev-{i:05d}" for i in range(0, DEVICES, 12)]
    answered: set[str] = set()
    no_data_after_data = Counter()
    errors: Counter[str] = Counter()
    watching = threading.Event()
    watching.set()
    try:
        with TestClient(built.app) as client:

            def watch() -> None:
                while watching.is_set():
                    r = client.get("/v1/predictions", params={"ids": ",".join(devices)})
                    if r.status_code != 200:  # counted and asserted below, not a silent death
                        errors[f"{r.status_code} {r.text[:200]}"] += 1
                        time.sleep(0.1)
                        continue
                    for d, p in zip(devices, r.json()["predictions"], strict=True):
                        if p["source"] == "precomputed":
                            answered.add(d)
                        elif d in answered:
                            no_data_after_data[d] += 1
                    time.sleep(0.1)

            watcher = threading.Thread(target=watch, daemon=True)
            load = Load(ks, topics, devices=DEVICES, rate=RATE // 2, seconds=40.0)
            load.start()
            watcher.start()
            time.sleep(8.0)
            extra = _workers(ks, topics, group, tmp_path, 2, start=1, **horizon)  # 1 -> 3
            time.sleep(10.0)
            for w in extra:  # 3 -> 1, gracefully (SIGTERM drains and commits)
                assert stop(w) == 0
            load.join(120)
            expected, _ = _no_lost_event_or_trigger(ks, topics, load, unique)
            watching.clear()
            watcher.join(10)
        assert not errors, f"the API answered with errors: {dict(errors)}"
        assert answered == set(devices)
        assert not no_data_after_data, f"answers lost their data: {dict(no_data_after_data)}"
        print(f"\nworkers 1 -> 3 -> 1: {len(expected)} events, 0 lost triggers, 0 no-data answers")
        assert stop(first[0]) == 0
    finally:
        watching.clear()
        built.materializer.stop()
        _kill_all(first + extra)


def test_two_api_replicas_over_redis_cluster_one_killed_the_other_answers(
    kafka_cluster, cluster_kafka_settings, cluster_topics, unique, tmp_path
):
    ks, topics = cluster_kafka_settings, cluster_topics
    rs = RedisSettings(url=kafka_cluster.redis_url, cluster=True, key_prefix=unique("api") + ":")
    devices = [f"dev-a{i:04d}" for i in range(300)]
    now = int(time.time() * 1000)
    publish(
        ks,
        topics.predictions.name,
        [(d, prediction_value(d, now - 300, now - 200)) for d in devices],
    )
    ports = free_port(), free_port()
    apis = [
        spawn_api(ks, topics, rs, port, unique(f"api{i}"), tmp_path / f"api-{i}.log")
        for i, port in enumerate(ports)
    ]
    try:
        for port in ports:
            wait_for(lambda port=port: api_ready(port), 120, 0.2, what=f"API on {port} ready")
        for port in ports:
            assert sources(port, devices[:100]) == Counter(precomputed=100)
        apis[0].kill()  # kill -9 one replica
        apis[0].wait(10)
        for _ in range(20):  # the survivor keeps answering, from the shared store
            assert sources(ports[1], devices[:100]) == Counter(precomputed=100)
        # and keeps materializing: newer predictions reach its answers
        later = int(time.time() * 1000)
        publish(
            ks,
            topics.predictions.name,
            [(d, prediction_value(d, later, later, "2.0.0")) for d in devices],
        )

        def newest_served() -> bool:
            import httpx2

            r = httpx2.get(f"http://127.0.0.1:{ports[1]}/v1/devices/{devices[-1]}/prediction")
            return r.json().get("model_version") == "2.0.0"

        wait_for(newest_served, 60, 0.2, what="the survivor serving the newer prediction")
        store = RedisStore.from_settings(rs)
        assert {e.model_version for e in store.get_many(devices)} == {"2.0.0"}
        redis_close(store.client)
        apis[1].send_signal(signal.SIGTERM)
        assert apis[1].wait(30) == 0
    finally:
        _kill_all(apis)


def test_redis_master_killed_fails_over_and_writes_resume(kafka_cluster, unique):
    rc = kafka_cluster.redis_cluster
    rs = RedisSettings(url=rc.url, cluster=True, key_prefix=unique("fo") + ":")
    store = RedisStore(connect(rs), rs.key_prefix)
    devices = [f"dev-f{i:04d}" for i in range(500)]
    rounds: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:  # a materializer's write path: batches of newest-wins puts
        r = 0
        try:
            while not done.is_set():
                r += 1
                base = 1_800_000_000_000 + r
                items = [(d, prediction(d, base, base, "1.0.0")) for d in devices]
                store.put_many_if_newer(items, now_ms=1_800_000_000_000, chunk=250)
                rounds.append(r)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    wait_for(lambda: len(rounds) >= 5, 30, what="writes flowing")
    victim = next(n for n in rc.masters() if n.port != rc.nodes[0].port)
    killed_at = time.monotonic()
    victim.stop(hard=True)  # kill -9 a master; its replica must take over its slots
    before = len(rounds)
    wait_for(lambda: len(rounds) > before + 3, 60, 0.05, what="writes resuming after failover")
    resumed_s = time.monotonic() - killed_at
    done.set()
    writer.join(60)
    assert not errors, errors
    last = 1_800_000_000_000 + rounds[-1]
    assert [e.computed_at_ms for e in store.get_many(devices)] == [last] * len(devices)
    assert len(rc.masters()) == 3  # the replica was promoted
    print(f"\nRedis master {victim.port} killed: writes resumed after {resumed_s:.1f}s")
    victim.start()  # it rejoins as a replica of its old slots' new master
    rc.wait_ready(60)
    store.clear()
    redis_close(store.client)


def test_broker_frozen_30s_no_duplicate_no_lost_record(
    kafka_cluster, cluster_kafka_settings, cluster_admin, unique
):
    ks, admin = cluster_kafka_settings, cluster_admin
    topic = unique("test.frozen")
    admin.create_topic(topic, 6, {"min.insync.replicas": "2"}, replication_factor=3)
    p = Producer(ks)
    sent = 0
    frozen = None
    try:
        marks = {part.partition: 1 for part in admin.partition_replicas(topic)}
        frozen = kafka_cluster.brokers[busiest_leader(admin, marks, topic) - 1]
        start = time.monotonic()
        stopped_at = None
        while time.monotonic() - start < 45:
            for _ in range(50):
                p.produce(topic, f"k{sent % 997}".encode(), orjson.dumps({"seq": sent}))
                sent += 1
            p.poll(0)
            if stopped_at is None and time.monotonic() - start > 5:
                os.kill(frozen.proc.pid(), signal.SIGSTOP)
                stopped_at = time.monotonic()
            if stopped_at and time.monotonic() - stopped_at > 30 and frozen.proc.pid():
                os.kill(frozen.proc.pid(), signal.SIGCONT)
                stopped_at = float("inf")
            time.sleep(0.05)
        p.flush(120)
        assert p.failed_total == 0
        c = Consumer(ks, unique("other-side"))
        c.assign([TopicPartitionOffset(topic, i, OFFSET_BEGINNING) for i in range(6)])
        seqs: list[int] = []
        deadline = time.monotonic() + 120
        while len(seqs) < sent and time.monotonic() < deadline:
            seqs += [orjson.loads(m.value())["seq"] for m in c.consume(5_000, 0.5)]
        time.sleep(2)
        seqs += [orjson.loads(m.value())["seq"] for m in c.consume(5_000, 1.0)]
        c.close()
        dupes = sum(n - 1 for n in Counter(seqs).values() if n > 1)
        print(f"\nbroker frozen 30 s: {sent} sent, {len(seqs)} read, {dupes} duplicates")
        assert dupes == 0
        assert sorted(seqs) == list(range(sent))
    finally:
        if frozen is not None and frozen.proc.pid():
            os.kill(frozen.proc.pid(), signal.SIGCONT)
        admin.wait_fully_replicated([topic], 3, timeout=120)
        admin.delete_topics([topic])
