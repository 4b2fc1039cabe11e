"""Freshness end to end: an event produced -> its answer readable from the read API and pushed on
its event stream, through the real worker, materializer and API processes, with 10k events/s of
fleet heartbeats flowing (at-least-once).

Probes are heartbeats of devices the worker has never seen (`first_seen`: always predicted, so
the probe measures the pipeline, not the speculation policy's choice). One event stream
subscribes to every probe device before the run; a poller GETs the probe's device until an answer
computed from the probe is served, GETs back to back on one keep-alive connection (a sleep between
polls would add up to its length to the figure; a GET here takes ~0.2 ms, and the poller runs
only for the few ms a probe waits, so its load on the API is small).
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time

import numpy as np
import orjson

from bench.bench_worker import LoadProcess, _wait_ready
from bench.harness import ROOT, Context, Figure, Report, app_env, progress, stop_processes

NAME = "freshness"
DESCRIPTION = "event produced -> answer readable from the API and pushed on SSE, at 10k events/s"

PARTITIONS = 6
RATE = 10_000


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _stream(
    port: int,
    devices: list[str],
    since: dict[str, int],
    pushed: dict[str, float],
    stop: threading.Event,
) -> None:
    """One event stream over every probe device; records when an answer computed from each
    probe (computed_at >= the probe's event time) arrives."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/v1/stream?ids=" + ",".join(devices))
    resp = conn.getresponse()
    event_id = None
    while not stop.is_set():
        line = resp.fp.readline()
        if not line:
            return
        if line.startswith(b"id:"):
            event_id = line[3:].strip().decode()
        elif line.startswith(b"data:") and event_id:
            body = orjson.loads(line[5:])
            t = since.get(event_id)
            if t is not None and (body.get("computed_at_ms") or 0) >= t and event_id not in pushed:
                pushed[event_id] = time.time() * 1000
    conn.close()


def _segments(header: str) -> dict[str, float]:
    """{"queue": ms, "model": ms, "kafka": ms, "cache": ms} from the answer's Server-Timing."""
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name.removeprefix("age.")] = float(dur)  # the age's entries (issue 26)
    return out


def run(ctx: Context) -> Report:
    from opsctl.stack.process import free_port
    from precast.kafka import Admin, Producer
    from producers.publisher import EventPublisher
    from producers.simulator import Fleet
    from schemas.topics import catalog

    seconds = 10.0 if ctx.quick else 40.0
    n_probes = 40 if ctx.quick else 200  # PRECAST_API__SSE_MAX_DEVICES
    admin = Admin(ctx.kafka_settings())
    topics = catalog(ctx.unique("fresh") + ".", PARTITIONS)
    admin.ensure_topics(list(topics))
    api_port, worker_port = free_port(), free_port()
    env = app_env(
        ctx.bootstrap_servers,
        topics,
        PARTITIONS,
        PRECAST_REDIS__URL="",
        PRECAST_API__GROUP_ID=ctx.unique("api"),
        PRECAST_API__PORT=str(api_port),
        PRECAST_WORKER__GROUP_ID=ctx.unique("w"),
        PRECAST_MODEL__PROVIDER="cpu",
        PRECAST_METRICS__PORT=str(worker_port),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", mod],
            env={
                **env,
                "PRECAST_METRICS__PORT": str(worker_port if mod == "workers.precompute.cli" else 0),
            },
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for mod in ("workers.precompute.cli", "consumer_api.cli")
    ]
    # Two timing threads here (poller, event stream): a thread that wants the GIL gets it
    # within 0.5 ms instead of Python's default 5 ms, which would otherwise show in the figures.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    probes = [f"probe-{i:04d}" for i in range(n_probes)]
    pushed: dict[str, float] = {}
    readable: dict[str, float] = {}
    produced: dict[str, float] = {}
    event_time: dict[str, int] = {}  # probe device -> its heartbeat's event time
    segments: dict[str, dict[str, float]] = {}  # where each probe's time went (Server-Timing)
    stop = threading.Event()
    load: LoadProcess | None = None
    load_t0, load_s, load_sent = time.monotonic(), 0.0, 0
    try:
        _wait_ready(worker_port)
        _wait_ready(api_port, timeout=120)
        streamer = threading.Thread(
            target=_stream, args=(api_port, probes, event_time, pushed, stop), daemon=True
        )
        streamer.start()
        # In its own process: the probe's timing threads never wait for the GIL behind it.
        load = LoadProcess(
            ctx.kafka_settings(), topics.heartbeats.name, rate=RATE, seconds=seconds + 5
        )
        progress(
            f"freshness: worker + API up; {RATE:,} heartbeats/s for {seconds + 5:.0f}s, "
            f"{n_probes} probes"
        )
        load.start()
        load_t0 = time.monotonic()
        time.sleep(3)  # the load reaches steady state
        template = Fleet(1, seed=3).heartbeats(1, 0)[0]
        publisher = EventPublisher(Producer(ctx.kafka_settings()), topics)
        # A new producer's first record waits for topic metadata (~0.5 s): not the pipeline's.
        publisher.publish({**template, "device_id": "warmup", "event_id": "warmup"})
        publisher.flush(5)
        conn = http.client.HTTPConnection("127.0.0.1", api_port, timeout=5)
        gap = seconds / n_probes
        for d in probes:
            now = time.time() * 1000
            t = int(now)
            event_time[d] = t
            publisher.publish(
                {
                    **template,
                    "device_id": d,
                    "event_id": f"{d}-{t}",
                    "event_time_ms": t,
                    "produced_at_ms": t,
                }
            )
            publisher.flush(5)  # the probe is on its way; its produce time is `now`
            produced[d] = now
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                conn.request("GET", f"/v1/devices/{d}/prediction")
                resp = conn.getresponse()
                body = orjson.loads(resp.read())
                if (body.get("computed_at_ms") or 0) >= t:  # an answer made from the probe
                    readable[d] = time.time() * 1000
                    segments[d] = _segments(resp.getheader("server-timing") or "")
                    break
            time.sleep(max(0.0, gap - (time.time() * 1000 - now) / 1000))
        time.sleep(1)
        conn.close()
    finally:
        sys.setswitchinterval(switch)
        stop.set()
        if load is not None:
            load.stop.set()
            load_s = time.monotonic() - load_t0
            load_sent = load.join()
        stop_processes(procs)
        admin.delete_topics([t.name for t in topics])
    e2e = [readable[d] - produced[d] for d in readable]
    sse = [pushed[d] - produced[d] for d in pushed if d in produced]
    cond = (
        f"{RATE:,} heartbeats/s of 10,000 devices for {seconds + 5:.0f}s (achieved "
        f"{load_sent / max(load_s, 1e-9):,.0f}/s from a load process at nice 10, standing in for "
        f"devices elsewhere), {PARTITIONS} partitions, 1 worker + 1 API process (in-process view), "
        f"at-least-once; {len(e2e)}/{n_probes} probes answered; probe = a first-seen device's "
        "heartbeat; shared 2-core machine"
    )
    rows = [
        [
            "event -> readable from GET (polled back to back)",
            len(e2e),
            _pct(e2e, 50),
            _pct(e2e, 99),
            max(e2e, default=float("nan")),
        ],
        [
            "event -> pushed on the event stream",
            len(sse),
            _pct(sse, 50),
            _pct(sse, 99),
            max(sse, default=float("nan")),
        ],
    ]
    for seg in ("queue", "model", "kafka", "cache"):
        xs = [v[seg] for v in segments.values() if seg in v]
        rows.append(
            [
                f"  of which {seg} (answer's Server-Timing)",
                len(xs),
                _pct(xs, 50),
                _pct(xs, 99),
                max(xs, default=float("nan")),
            ]
        )
    figures = [
        Figure("freshness_e2e_p50_ms", round(_pct(e2e, 50), 1), "ms", "goal <= 5", cond),
        Figure("freshness_e2e_p99_ms", round(_pct(e2e, 99), 1), "ms", "goal <= 25", cond),
        Figure("sse_push_p99_ms", round(_pct(sse, 99), 1), "ms", "goal <= 25", cond),
    ]
    return Report(
        "Freshness end to end (`python -m bench freshness`)",
        ["path", "probes", "p50 ms", "p99 ms", "max ms"],
        rows,
        figures,
        [cond],
    )
