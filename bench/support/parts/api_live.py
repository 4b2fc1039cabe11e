"""`python -m bench api`, live: hit ratio and freshness of the read API while the simulator and
workers run, probed over HTTP."""

from __future__ import annotations

import collections
import http.client
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import orjson

from bench.support.harness import ROOT, Context, app_env, progress
from bench.support.loads.api_load import ApiServer, fixed_rate, zipf_paths


def _probe_freshness(
    url: str,
    publisher,
    fleet_event: dict,
    probes: int,
    stop: threading.Event,
    sources: collections.Counter,
) -> list[float]:
    """Publish a heartbeat for a probe device, poll until an answer computed from it is served.
    `sources` counts the probe's own reads by answer source, so the hit ratio can leave them out:
    a probe device gets a heartbeat only when probed (every few seconds), so its polls often
    see an expired answer until the new one lands, which says nothing about the UI's reads."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    out = []
    for i in range(probes):
        if stop.is_set():
            break
        device = f"probe-{i % 50:03d}"
        now = int(time.time() * 1000)
        publisher.publish(
            {
                **fleet_event,
                "device_id": device,
                "event_id": f"probe-{now}-{i}",
                "event_time_ms": now,
                "produced_at_ms": now,
            }
        )
        publisher.flush(5)
        t_pub = time.time()
        deadline = t_pub + 10
        while time.time() < deadline:
            conn.request("GET", f"/v1/devices/{device}/prediction")
            body = orjson.loads(conn.getresponse().read())
            sources[body.get("source", "?")] += 1
            if (body.get("computed_at_ms") or 0) >= now:
                out.append((time.time() * 1000) - now)
                break
            time.sleep(0.002)
        time.sleep(0.1)
    conn.close()
    return out


def live_phase(
    ctx: Context, topics, devices: int, rate: int, seconds: float
) -> tuple[list[list], dict]:
    """Simulator + worker + API; Zipf reads at a fixed rate; hit ratio from the API's counters."""
    from precast.kafka import Producer
    from producers.publisher import EventPublisher
    from producers.simulator import Fleet

    env = app_env(
        ctx.bootstrap_servers,
        topics,
        topics.predictions.partitions,
        PRECAST_REDIS__URL="",
        PRECAST_API__GROUP_ID=ctx.unique("api"),
        PRECAST_WORKER__GROUP_ID=ctx.unique("workers"),
        PRECAST_SIMULATOR__DEVICES=str(devices),
        PRECAST_SIMULATOR__RATE=str(rate),
        PRECAST_MODEL__PROVIDER="cpu",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", m],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for m in ("producers.cli", "workers.precompute.cli")
    ]
    server = ApiServer(8791, {k: env[k] for k in env if k.startswith("PRECAST_")}, devices)
    rows: list[list] = []
    res: dict[str, Any] = {}
    try:
        server.wait_ready()
        warm = 2 * devices / rate + 10
        progress(
            f"live: simulator {devices:,} devices at {rate:,}/s + worker + API; warming up {warm:.0f}s"
        )
        time.sleep(warm)
        fleet_event = Fleet(1, seed=3).heartbeats(1, int(time.time() * 1000))[0]
        publisher = EventPublisher(Producer(ctx.kafka_settings()), topics)
        stop = threading.Event()
        fresh: list[float] = []
        for i in range(50):  # probe devices get a first answer before the measured window
            publisher.publish(
                {**fleet_event, "device_id": f"probe-{i:03d}", "event_id": f"warm-{i}"}
            )
        publisher.flush(5)
        time.sleep(2)
        probe_reads: collections.Counter = collections.Counter()
        prober = threading.Thread(
            target=lambda: fresh.extend(
                _probe_freshness(server.url, publisher, fleet_event, 10_000, stop, probe_reads)
            )
        )
        reads = {
            s: server.metric("precast_api_reads_total", f'{{source="{s}"}}')
            for s in ("precomputed", "stale", "fallback")
        }
        prober.start()
        r = fixed_rate(
            server.url, zipf_paths([f"dev-{i:06d}" for i in range(devices)], 50_000), 1_000, seconds
        )
        stop.set()
        prober.join()
        after = {s: server.metric("precast_api_reads_total", f'{{source="{s}"}}') for s in reads}
        # UI reads only: the API's counters minus the freshness probe's own polls.
        delta = {s: after[s] - reads[s] - probe_reads[s] for s in reads}
        total = sum(delta.values())
        hit = delta["precomputed"] / total if total else 0.0
        res.update(hit=hit, delta=delta, fresh=fresh, zipf=r, probe_reads=probe_reads)
        fp = np.percentile(fresh, [50, 99]) if fresh else [float("nan")] * 2
        progress(
            f"live: hit ratio {hit:.5f} ({delta}), freshness p50 {fp[0]:.0f} ms p99 "
            f"{fp[1]:.0f} ms over {len(fresh)} probes"
        )
        rows.append(
            [
                "live: Zipf reads 1,000/s, simulator + worker",
                f"{int(total):,} reads",
                f"hit {hit * 100:.3f} %",
                f"p99 {r['p99']:.2f} ms",
                f"stale {int(delta['stale'])}, fallback {int(delta['fallback'])}",
            ]
        )
        rows.append(
            [
                "live: event produced -> newest answer served",
                f"{len(fresh)} probes",
                f"p50 {fp[0]:.0f} ms",
                f"p99 {fp[1]:.0f} ms",
                "",
            ]
        )
    finally:
        server.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    return rows, res
