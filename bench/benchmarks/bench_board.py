"""The operations-center board in headless Chromium: event produced -> row updated in the DOM
at 1k events/s through the whole pipeline (heartbeat -> worker -> predictions -> API ->
board stream -> page), next to event -> prediction in Kafka for the same events, and the
page's JS heap after the first minute vs at the end of the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.support.harness import Context, Figure, Report, app_env, progress

NAME = "board"
DESCRIPTION = "board: event -> DOM latency at 1k events/s, JS heap growth over the run"
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "both cores free: headless Chromium, the API, the worker and the broker share them; "
    "event-to-screen latencies move first when anything else runs."
)
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 6
DEVICES = 1_000
RATE = 1_000  # events/s: one heartbeat per device per second
# The issue asks for 10 minutes; PRECAST_BENCH_BOARD_S shortens a run (the figure's
# conditions state the duration actually measured).
DURATION_S = float(os.environ.get("PRECAST_BENCH_BOARD_S", "600"))


def _produce(settings, topic: str, seconds: float, stop: threading.Event) -> int:
    """Heartbeats of a simulated fleet at RATE/s in slices of 20 ms, event time = produce time."""
    from precast.kafka import Producer
    from producers.simulator import Fleet

    fleet, p = Fleet(DEVICES, seed=5), Producer(settings)
    start, sent, slice_n = time.monotonic(), 0, RATE // 50
    while not stop.is_set() and time.monotonic() - start < seconds:
        ahead = sent / RATE - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
        now = int(time.time() * 1000)
        for e in fleet.heartbeats(slice_n, now):
            p.produce(topic, e["device_id"].encode(), orjson.dumps(e))
        p.poll(0)
        sent += slice_n
    p.flush()
    return sent


def _spawn(module: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", module], env=env, cwd=ROOT, stdin=subprocess.DEVNULL
    )


def _wait(url: str, timeout: float = 90) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} not ready")


def _heap_mb(driver) -> float:
    driver.execute_cdp_cmd("HeapProfiler.collectGarbage", {})
    return driver.execute_cdp_cmd("Runtime.getHeapUsage", {})["usedSize"] / 2**20


def _sample(driver, seconds: float) -> tuple[list, float | None, float, int, int, float]:
    """Paints drained from the page every 5 s, the heap after one minute and at the end."""
    deadline = time.monotonic() + 60
    while not driver.execute_script(
        "return window.precastBoard.ready && window.precastBoard.frames > 0"
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("the board did not load")
        time.sleep(0.2)
    progress(f"board loaded; {seconds:.0f} s of updates at {RATE}/s")
    driver.execute_script("window.precastBoard.paints.splice(0)")
    frames0 = driver.execute_script("return window.precastBoard.frames")
    start, paints, heap_1m = time.monotonic(), [], None
    while (elapsed := time.monotonic() - start) < seconds:
        time.sleep(5)
        paints += driver.execute_script("return window.precastBoard.paints.splice(0)")
        if heap_1m is None and elapsed >= 60:
            heap_1m = _heap_mb(driver)
            progress(f"JS heap after 1 min: {heap_1m:.1f} MB")
    measured = time.monotonic() - start
    paints += driver.execute_script("return window.precastBoard.paints.splice(0)")
    heap_end = _heap_mb(driver)
    frames = driver.execute_script("return window.precastBoard.frames") - frames0
    resets = driver.execute_script("return window.precastBoard.resets")
    return paints, heap_1m, heap_end, frames, resets, measured


def run(ctx: Context) -> Report:
    from opsctl.stack.process import free_port
    from precast.kafka import OFFSET_END, Admin, Consumer, TopicPartitionOffset
    from schemas.topics import catalog
    from tests.integration.board_support import chrome, close_chrome

    seconds = min(DURATION_S, 30.0) if ctx.quick else DURATION_S
    admin = Admin(ctx.kafka_settings())
    topics = catalog(ctx.unique("board") + ".", PARTITIONS)
    admin.ensure_topics(list(topics))
    worker_port, api_port = free_port(), free_port()
    base = app_env(ctx.bootstrap_servers, topics, PARTITIONS, PRECAST_REDIS__URL="")
    procs = [
        _spawn(
            "workers.precompute.cli",
            {
                **base,
                "PRECAST_WORKER__GROUP_ID": ctx.unique("bw"),
                "PRECAST_MODEL__PROVIDER": "cpu",
                "PRECAST_METRICS__PORT": str(worker_port),
            },
        ),
        _spawn("consumer_api.cli", {**base, "PRECAST_API__PORT": str(api_port)}),
    ]
    committed_only: dict[str, Any] = {"isolation.level": "read_committed"}
    reader = Consumer(ctx.kafka_settings(), ctx.unique("br"), **committed_only)
    reader.assign(
        [TopicPartitionOffset(topics.predictions.name, p, OFFSET_END) for p in range(PARTITIONS)]
    )
    driver = None
    stop = threading.Event()
    try:
        _wait(f"http://127.0.0.1:{worker_port}/readyz")
        _wait(f"http://127.0.0.1:{api_port}/readyz")
        kafka_ms: list[float] = []

        def read() -> None:  # event -> prediction readable in Kafka, for the same events
            while not stop.is_set():
                for m in reader.consume(1_000, 0.005):  # a poll waits for a full batch or this
                    kafka_ms.append(
                        time.time() * 1000 - orjson.loads(m.value() or b"{}")["computed_at_ms"]
                    )

        t_read = threading.Thread(target=read, daemon=True)
        t_read.start()
        sent_box: list[int] = []
        producer = threading.Thread(
            target=lambda: sent_box.append(
                _produce(ctx.kafka_settings(), topics.heartbeats.name, seconds + 15, stop)
            ),
            daemon=True,
        )
        producer.start()
        driver = chrome(1366, 768)
        driver.get(f"http://127.0.0.1:{api_port}/board/")
        # Let the fleet fill the board before timing (every device once) and drop those paints.
        time.sleep(5)
        kafka_ms.clear()
        paints, heap_1m, heap_end, frames, resets, measured = _sample(driver, seconds)
        stop.set()
        producer.join(30)
        t_read.join(5)
    finally:
        stop.set()
        if driver is not None:
            close_chrome(driver)
        reader.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        admin.delete_topics([t.name for t in topics])

    screen = np.array([shown - computed for _, computed, shown in paints if computed is not None])
    kafka = np.array(kafka_ms)
    if heap_1m is None:  # a run shorter than a minute: the heap at the first sample stands in
        heap_1m = heap_end

    def pct(a: np.ndarray, q: float) -> float:
        return float(np.percentile(a, q)) if len(a) else float("nan")

    dur = f"{measured / 60:.1f} min of updates" + (
        ""
        if measured >= 590
        else f" (the issue asks for 10 min; PRECAST_BENCH_BOARD_S={seconds:.0f})"
    )
    cond = (
        f"{DEVICES} devices, {RATE} heartbeats/s through a worker process and a precast-api process "
        f"(board stream, 25 ms frames), Debian Chromium headless at 1366x768 sorted by device, "
        f"rows in view measured ({len(screen)} updates); {dur}"
    )
    return Report(
        title="Board: event produced -> visible in the DOM (headless Chromium), JS heap",
        columns=["path", "samples", "p50 ms", "p90 ms", "p99 ms", "max ms"],
        rows=[
            [
                "event -> prediction in Kafka",
                len(kafka),
                pct(kafka, 50),
                pct(kafka, 90),
                pct(kafka, 99),
                pct(kafka, 100),
            ],
            [
                "event -> row in the board's DOM",
                len(screen),
                pct(screen, 50),
                pct(screen, 90),
                pct(screen, 99),
                pct(screen, 100),
            ],
        ],
        figures=[
            Figure(
                "board_event_to_screen_p50_ms",
                pct(screen, 50),
                "ms",
                f"event -> prediction in Kafka p50 {pct(kafka, 50):.0f} ms",
                cond,
            ),
            Figure(
                "board_event_to_screen_p99_ms",
                pct(screen, 99),
                "ms",
                f"goal <= 100; event -> Kafka p99 {pct(kafka, 99):.0f} ms",
                cond,
            ),
            Figure(
                "board_heap_growth_ratio",
                heap_end / heap_1m,
                "x",
                f"goal <= 2; JS heap after GC {heap_1m:.1f} MB at 1 min, {heap_end:.1f} MB at the end",
                cond,
            ),
        ],
        notes=[
            f"{frames} rendered frames ({frames / measured:.1f}/s), {resets} reloads; "
            f"{sum(sent_box):,} heartbeats sent",
            "latency = Date.now() when the row's new text is written minus the heartbeat's event "
            "time (= its produce time; the worker's computed_at_ms is the newest input's event time)",
            "heap = Runtime.getHeapUsage usedSize after HeapProfiler.collectGarbage (CDP)",
        ],
    )
