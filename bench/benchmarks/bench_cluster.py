"""The pipeline on a private 3-broker KRaft cluster (RF 3, min.insync.replicas 2) with a Redis
Cluster: the leader of the busiest partitions killed under load (lost events, recovery time),
worker scale-out (3 vs 1 worker processes, same run), and a soak of 3 brokers, 2 workers and 2
API replicas (RSS of every process, worker lag, nothing lost), on all cores and again with every
process pinned to one core (a slower machine: the API replicas' memory must stay flat there too).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import orjson

from bench.support.harness import Context, Report, pin, progress, stop_processes
from bench.support.parts.cluster_groups import group_coordinator, group_led_by
from bench.support.parts.cluster_procs import (
    PARTITIONS,
    LeaderWatch,
    Load,
    PostFaultTail,
    active_controller,
    heap_growth,
    heap_sample,
    high_watermarks,
    lineage_covered,
    lost_assignments,
    private_stack,
    rss_bytes,
    spawn_api,
    spawn_worker,
    wait_http,
)
from bench.support.parts.cluster_report import report
from bench.support.parts.cluster_stalls import BOUND_S, after_kill, path_watch

NAME = "cluster"
DESCRIPTION = "3-broker cluster: leader kill -9 under load, worker scale-out 3 vs 1, soak RSS"

# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "both cores, and nothing else running: 3 brokers, 6 Redis nodes, 2 workers, 2 API "
    "replicas and the load saturate them by design (recovery times and lag grow with any "
    "other load; RSS growth needs no spare CPU but grows with lag). The one-core soak pins "
    "everything to CPU 0."
)
# The rates: 10k heartbeats/s around the leader kill, 5k/s for 10 minutes in the soak.
# The load generator cycles pre-encoded records (bench.support.parts.cluster_procs.Load) so that one Python
# thread sends them beside three brokers and the workers on 2 cores; the achieved rate is
# reported with every figure.
KILL_RATE = 10_000
KILL_RUNS = 3  # the recovery figure is the worst of these (one in a --quick run)
SOAK_RATE = 5_000
# One core carries the three brokers, six Redis nodes, two workers, two API replicas, the load
# and the reads: it cannot keep up with 5k/s (measured: worker lag 125k records after 70 s and
# growing, until the bench's own admin calls timed out). A backlog that grows without end
# measures the backlog, not whether memory stays flat, so the one-core soak asks what one core
# sustains, with the same fleet, length and reads.
SOAK_RATE_ONE_CORE = 2_000
SOAK_SECONDS = 600
DEVICES = 3_000
# A comma list of the parts to run: kill, scale, soak, soak1. With --quick for development; in a
# full run the parts get a BENCHMARKS.md section of their own ("cluster:soak1"), so the whole
# run's section stays, and their figures merge into bench/results.json.
ONLY_ENV = "PRECAST_BENCH_CLUSTER_ONLY"
KILLS_ENV = "PRECAST_BENCH_CLUSTER_KILLS"  # how many leader kills (default KILL_RUNS, 1 quick)
# Which broker each kill takes: "busiest" (the leader of the busiest heartbeat partitions) or
# "controller" (the active KRaft controller, which leads partitions too). By default the last
# run kills the controller: it is the slow case (a new controller is elected and counts the dead
# node's session from its own start), and leaving it to chance hid it for several runs.
VICTIM_ENV = "PRECAST_BENCH_CLUSTER_VICTIM"


def _catalog(ctx: Context, admin):
    from schemas.topics import catalog

    topics = catalog(ctx.unique("c") + ".", PARTITIONS, replication_factor=3)
    admin.ensure_topics(list(topics))
    return topics


def _leader_kill(ctx, stack, settings, admin, logs: Path, run: int, target: str) -> dict:
    """One kill -9, 8 s into a load at KILL_RATE, of the broker leading the busiest heartbeat
    partitions (target "busiest") or of the active controller (target "controller"), which is
    then made the workers' group coordinator too.

    Recovery is timed from the kill to the first prediction of an event created after it, on
    every partition the victim led (and on all partitions, since with acks=all a partition the
    victim only followed waits for it too until it is fenced). The steps in between are timed
    as well: new leaders in the metadata, inputs readable again, answers."""
    from opsctl.stack.process import free_port

    topics = _catalog(ctx, admin)
    hb, preds = topics.heartbeats.name, topics.predictions.name
    controller = active_controller(stack)
    group = ctx.unique("kill")
    if target == "controller" and controller is not None:
        # the worst case: the victim leads partitions, the KRaft quorum and the workers' group
        group = group_led_by(settings, admin, group, controller)
    ports, aport = [free_port(), free_port()], free_port()
    workers = [spawn_worker(stack, topics, group, p, logs / f"kill{run}-w{p}.log") for p in ports]
    # One API replica reads the answers too: its reader is one of the stages a stall is named by.
    prefix = ctx.unique(f"kill{run}").replace(".", "-") + ":"
    api_log = logs / f"kill{run}-api{aport}.log"
    workers.append(spawn_api(stack, topics, ctx.unique(f"kapi{run}"), aport, prefix, api_log))
    try:
        for p in [*ports, aport]:
            wait_http(p)
        stood = path_watch(ports, aport, hb)
        stood.start()
        seconds = 20 if ctx.quick else 30
        load = Load(settings, hb, DEVICES, KILL_RATE, seconds)
        load.start()
        time.sleep(8)
        marks = high_watermarks(settings, hb)
        per_leader: Counter[int] = Counter()
        for part in admin.partition_replicas(hb):
            per_leader[part.leader] += marks[part.partition]
        victim_id = per_leader.most_common(1)[0][0]
        if target == "controller" and controller is not None:
            victim_id = controller
        affected = {
            p.partition
            for t in (hb, preds)
            for p in admin.partition_replicas(t)
            if p.leader == victim_id
        }
        coordinator = group_coordinator(settings, admin, group)
        inputs = PostFaultTail(settings, hb, predictions=False)
        answers = PostFaultTail(settings, preds, predictions=True)
        inputs.start()
        answers.start()
        time.sleep(1.0)  # both tails assigned and fetching at the end
        survivors = ",".join(b.bootstrap for b in stack.brokers if b.node_id != victim_id)
        watch = LeaderWatch(survivors, [hb, preds], victim_id)
        victim = stack.brokers[victim_id - 1]
        progress(
            f"kill -9 broker {victim_id} (leads partitions {sorted(affected)}; active "
            f"controller {controller}, group coordinator {coordinator})"
        )
        inputs.since_ms = answers.since_ms = int(time.time() * 1000)
        killed = time.monotonic()
        victim.stop(hard=True)
        watch.start()
        everywhere = set(range(PARTITIONS))
        flowing = answers.wait_flowing(everywhere, timeout=90)
        recovered = None if flowing is None else flowing - killed
        led = answers.wait_flowing(affected or everywhere, timeout=0)  # a victim may lead none
        # The tail is a consumer of its own and may find the new leaders after the workers did.
        inputs_back = inputs.wait_flowing(everywhere, timeout=30)
        end = flowing if flowing is not None else time.monotonic()
        gap = answers.longest_gap(killed, end)
        still, stalled = after_kill(stood, watch.moved, inputs, answers, killed, end, load.ended)
        stalled = stalled if recovered is None or recovered > BOUND_S else None
        if stalled is not None:
            progress(f"kill {run}: answers took over {BOUND_S:.0f} s; stalled: {stalled} {still}")
        stood.done.set()
        watch.done.set()
        inputs.done.set()
        answers.done.set()
        victim.start()
        victim.wait_ready(120)
        load.join(180)
        ends = high_watermarks(settings, hb)
        on_topic = sum(ends.values())
        lost_triggers = lineage_covered(settings, preds, hb, ends)
        for t in (inputs, answers, watch, stood):
            t.join(10)
        admin.wait_fully_replicated([hb, preds], 3, timeout=120)  # next kill starts whole
        return {
            "run": run,
            "sent": load.sent,
            "rate": load.achieved_rate,
            "refused": load.p.failed_total,
            "lost_events": load.sent - on_topic,
            "lost_triggers": lost_triggers,
            "recovery_s": None if led is None else led - killed,
            "recovery_all_s": recovered,
            "leaders_moved_s": None if watch.moved is None else watch.moved - killed,
            "inputs_back_s": None if inputs_back is None else inputs_back - killed,
            "answers_gap_s": gap,
            "seconds": seconds,
            "victim": victim_id,
            "controller": controller,
            "coordinator": coordinator,
            "lost_assignments": sum(lost_assignments(logs / f"kill{run}-w{p}.log") for p in ports),
            "stalled": stalled,  # None: answers within BOUND_S; else the stage that stood still
            "stood_still_s": still,
            "unreadable_answers": answers.unreadable,
            "error": load.error,
        }
    finally:
        stop_processes(workers)


def _drain_rate(ctx, stack, settings, admin, n_workers: int, events: int, logs: Path) -> float:
    """Events/s that `n_workers` worker processes drain from a backlog: measured from the moment
    every worker is ready (start-up and the first rebalances excluded) to the group's commits
    reaching the end."""
    from opsctl.stack.process import free_port
    from precast.kafka import Producer
    from producers.simulator import Fleet

    topics = _catalog(ctx, admin)
    hb = topics.heartbeats.name
    p, fleet, sent, t_event = Producer(settings), Fleet(DEVICES, seed=9), 0, int(time.time() * 1000)
    while sent < events:
        t_event += 1_000  # one fleet round per event-time second: every heartbeat is a trigger
        for e in fleet.heartbeats(DEVICES, t_event):
            p.produce(hb, e["device_id"].encode(), orjson.dumps(e))
        p.poll(0)
        sent += DEVICES
    p.flush(120)
    group = ctx.unique(f"scale{n_workers}")
    ports = [free_port() for _ in range(n_workers)]
    workers = [
        spawn_worker(stack, topics, group, port, logs / f"scale-w{port}.log") for port in ports
    ]
    try:

        def committed() -> int:
            return sum(t.offset for t in admin.committed_offsets(group) if t.topic == hb)

        for port in ports:
            wait_http(port)
        t0, c0 = time.monotonic(), committed()
        deadline = t0 + 600
        while time.monotonic() < deadline:
            if (done := committed()) >= sent:
                return (done - c0) / (time.monotonic() - t0)
            time.sleep(0.2)
        raise TimeoutError(f"{n_workers} worker(s) did not drain {sent} events in 600 s")
    finally:
        stop_processes(workers)


def _lag(settings, admin, topic: str, group: str) -> int | None:
    """The group's lag on `topic` (None when the brokers did not answer in time)."""
    from precast.kafka.errors import KafkaFailure

    try:
        ends = high_watermarks(settings, topic)
        committed = admin.committed_offsets(group)
    except KafkaFailure:
        return None
    done = {t.partition: t.offset for t in committed if t.topic == topic}
    return sum(ends[p] - done.get(p, 0) for p in ends)


def _sample(pids: dict, samples: dict, aports: list[int], heaps: dict) -> None:
    for k, pid in pids.items():
        samples[k].append(rss_bytes(pid or 0))
    for i, port in enumerate(aports):
        heaps[f"api {i + 1}"].append(heap_sample(port))


def _soak(ctx, stack, settings, admin, logs: Path, one_core: bool = False) -> dict:
    from opsctl.stack.process import free_port

    topics = _catalog(ctx, admin)
    hb = topics.heartbeats.name
    group = ctx.unique("soak")
    wports, aports = [free_port(), free_port()], [free_port(), free_port()]
    procs = [spawn_worker(stack, topics, group, p, logs / f"soak-w{p}.log") for p in wports]
    prefix = ctx.unique("soak").replace(".", "-") + ":"
    procs += [
        spawn_api(stack, topics, ctx.unique(f"api{p}"), p, prefix, logs / f"soak-api{p}.log")
        for p in aports
    ]
    seconds = 60 if ctx.quick else SOAK_SECONDS
    warmup = min(120, seconds // 4)
    try:
        for p in wports + aports:
            wait_http(p)
        rate = SOAK_RATE_ONE_CORE if one_core else SOAK_RATE
        load = Load(settings, hb, DEVICES, rate, seconds)
        reads = {"ok": 0, "errors": 0}
        stop_reads = threading.Event()

        def reader() -> None:  # a light, steady read load across both replicas
            i = 0
            while not stop_reads.is_set():
                port = aports[i % 2]
                ids = ",".join(f"dev-{(i * 7 + k) % DEVICES:06d}" for k in range(20))
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/v1/predictions?ids={ids}", timeout=5
                    ) as r:
                        reads["ok" if r.status == 200 else "errors"] += 1
                except OSError:
                    reads["errors"] += 1
                i += 1
                time.sleep(0.05)

        pids = {f"worker {i + 1}": w.pid for i, w in enumerate(procs[:2])}
        pids |= {f"api {i + 1}": a.pid for i, a in enumerate(procs[2:])}
        pids |= {b.proc.name: b.proc.pid() for b in stack.brokers}
        assert stack.redis_cluster is not None
        pids |= {n.proc.name: n.proc.pid() for n in stack.redis_cluster.nodes}
        samples: dict[str, list[int]] = {k: [] for k in pids}
        heaps: dict[str, list[dict[str, float]]] = {f"api {i + 1}": [] for i in range(2)}
        lags: list[int | None] = []
        pinned = [*pids.values(), os.getpid()]  # this process: the load and the reads
        if one_core:  # the constrained machine: every process of the soak shares CPU 0
            for pid in pinned:
                pin(pid, "0")
        threading.Thread(target=reader, daemon=True).start()
        load.start()
        t0 = time.monotonic()
        while load.is_alive():
            time.sleep(5)
            _sample(pids, samples, aports, heaps)
            lags.append(_lag(settings, admin, hb, group))  # None: a starved broker, go on
            progress(f"soak {time.monotonic() - t0:.0f}/{seconds}s, lag {lags[-1]}")
        stop_reads.set()
        ends = high_watermarks(settings, hb)
        lost_triggers = lineage_covered(settings, topics.predictions.name, hb, ends)
        first_after_warmup = warmup // 5
        growth = {}
        for k, xs in samples.items():
            base, tail = xs[first_after_warmup], xs[-max(1, len(xs) // 4) :]
            growth[k] = 100.0 * (sum(tail) / len(tail) - base) / base if base else 0.0
        return {
            "seconds": seconds,
            "warmup": warmup,
            "growth": growth,
            # what grew inside each API replica: first sample after warm-up -> last quarter
            "heap": {k: heap_growth(xs, first_after_warmup) for k, xs in heaps.items()},
            "rss_mb": {k: xs[-1] / 2**20 for k, xs in samples.items()},
            "max_lag": max((x for x in lags[first_after_warmup:] if x is not None), default=0),
            "lag_unread": lags.count(None),
            "asked": rate,
            "sent": load.sent,
            "rate": load.achieved_rate,
            "lost_events": load.sent - sum(ends.values()) + load.p.failed_total,
            "lost_triggers": lost_triggers,
            "reads": reads,
            "cores": 1 if one_core else os.cpu_count(),
        }
    finally:
        if one_core:
            for pid in pinned:
                pin(pid, f"0-{(os.cpu_count() or 1) - 1}")
        stop_processes(procs)


def run(ctx: Context) -> Report:
    from precast.kafka import Admin
    from precast.settings import KafkaSettings

    only = {x for x in os.environ.get(ONLY_ENV, "").split(",") if x}
    want = lambda part: not only or part in only  # noqa: E731
    stack = private_stack()
    logs = Path(tempfile.mkdtemp(prefix="precast-bench-cluster-logs-"))
    kills: list[dict] = []
    one = three = float("nan")
    backlog = 60_000 if ctx.quick else 300_000
    soak: dict | None = None
    soak1: dict | None = None
    try:
        settings = KafkaSettings(bootstrap_servers=stack.bootstrap_servers)
        admin = Admin(settings)
        runs = int(os.environ.get(KILLS_ENV, 1 if ctx.quick else KILL_RUNS))
        victim = os.environ.get(VICTIM_ENV)
        for i in range(runs) if want("kill") else ():
            target = victim or ("controller" if i == runs - 1 else "busiest")
            progress(f"leader kill {i + 1} ({target}) under load ...")
            kills.append(_leader_kill(ctx, stack, settings, admin, logs, i + 1, target))
            progress(f"leader kill {i + 1}: {kills[-1]}")
        if want("scale"):
            # Large enough that the drain after the last worker is ready lasts many commit intervals
            progress("scale-out: 1 worker ...")
            one = _drain_rate(ctx, stack, settings, admin, 1, backlog, logs)
            progress("scale-out: 3 workers ...")
            three = _drain_rate(ctx, stack, settings, admin, 3, backlog, logs)
        if want("soak"):
            progress("soak ...")
            soak = _soak(ctx, stack, settings, admin, logs)
        if want("soak1"):
            progress("soak on one core (every process pinned to CPU 0) ...")
            soak1 = _soak(ctx, stack, settings, admin, logs, one_core=True)
    finally:
        stack.down()
    progress(f"logs: {logs}")
    out = report(kills, one, three, backlog, [soak, soak1], kill_rate=KILL_RATE)
    if only:
        out.section = "cluster:" + "+".join(sorted(only))
        out.notes.append(
            f"A partial run: {ONLY_ENV}={','.join(sorted(only))} python -m bench cluster"
        )
    return out
