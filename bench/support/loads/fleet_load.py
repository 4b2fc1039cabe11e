"""The benchmarks' fleet load: heartbeats of simulated devices produced as a backlog or at a steady
rate, the latter from a child process (`LoadProcess`) that stands in for devices on other
machines."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import orjson

LOAD_DEVICES = 10_000  # the devices a `LoadProcess` sends for (the same IDs every time)


def produce_heartbeats(
    settings,
    topic: str,
    devices: int,
    rounds: int,
    rate: float | None = None,
    seconds: float | None = None,
    stop: threading.Event | None = None,
    step_s: float = 0.001,
) -> int:
    """Heartbeats from a simulated fleet; each round is one heartbeat per device, 1 s of event
    time later. Paced at `rate`/s for `seconds` when given, `step_s` worth at a time."""
    from precast.kafka import Producer
    from producers.publisher import TraceIds
    from producers.simulator import Fleet

    fleet, p, trace = Fleet(devices, seed=3), Producer(settings), TraceIds(seed=3).new
    if rate is not None:
        return paced(p, fleet, trace, topic, devices, rate, seconds, stop, step_s=step_s)
    # Unpaced rounds step event time 1 s each: start that far back so none lies in the future
    # (a worker dead-letters event times ahead of its clock).
    back = 1000 * rounds
    t0, sent = int(time.time() * 1000) - back, 0
    chunk = 500
    while sent < devices * rounds:
        now = t0 + 1000 * (sent // devices)
        for e in fleet.heartbeats(chunk, now):
            p.produce(topic, e["device_id"].encode(), orjson.dumps(e), [("traceparent", trace())])
        p.poll(0)
        sent += chunk
    p.flush()
    return sent


def paced(
    p, fleet, trace, topic, devices, rate, seconds, stop, pool: int = 2, step_s: float = 0.001
) -> int:
    """`rate` heartbeats/s, `step_s` worth at a time: a millisecond's by default, as a fleet
    sends (a 500-record burst every 50 ms would put up to 50 ms of the load's own queueing into
    every freshness figure that starts at a load record's produce call). The load stands in for
    devices on other machines, so it must cost this machine as little as it can: `pool` rounds
    of the fleet are drawn and encoded once and cycled, each record sent with the current time
    patched into its fixed-width time fields (drawing and encoding a heartbeat per record took a
    fifth of a core at 1,000 events/s)."""
    base = int(time.time() * 1000)
    marker = str(base).encode()  # 13 digits until 2286: the same width as any fresh time
    records = [
        (e["device_id"].encode(), orjson.dumps(e), [("traceparent", trace())])
        for e in fleet.heartbeats(devices * pool, base)
    ]
    produce, n, i, sent, start = p.produce, len(records), 0, 0, time.monotonic()
    chunk = max(1, int(rate * step_s))
    while (seconds is None or time.monotonic() - start < seconds) and not (
        stop is not None and stop.is_set()
    ):
        ahead = sent / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
        now = str(int(time.time() * 1000)).encode()
        for _ in range(chunk):
            key, value, headers = records[i]
            produce(topic, key, value.replace(marker, now), headers)
            i = (i + 1) % n
        p.poll(0)
        sent += chunk
    p.flush()
    return sent


class LoadProcess:
    """`produce_heartbeats` at a steady rate in a child process. A latency benchmark's timing
    threads then never wait for the GIL behind the load generator (Python hands the GIL over
    only every 5 ms to a thread that asks for it)."""

    def __init__(
        self, settings, topic: str, *, rate: float, seconds: float, step_s: float = 0.001
    ) -> None:
        mp = multiprocessing.get_context("spawn")
        self.stop, self.started, self._sent = mp.Event(), mp.Event(), mp.Value("q", -1)
        self._proc = mp.Process(
            target=_load_child,
            args=(settings, topic, rate, seconds, self.stop, self.started, self._sent, step_s),
            daemon=True,
        )

    def start(self, timeout: float = 60) -> None:
        self._proc.start()
        if not self.started.wait(timeout):
            raise RuntimeError("the load process did not start")

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def join(self, timeout: float = 60) -> int:
        """Records sent (after the run ends or `stop` is set)."""
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            raise RuntimeError("the load process did not finish")
        return int(self._sent.value)


def _load_child(settings, topic, rate, seconds, stop, started, sent, step_s) -> None:
    # The load stands in for devices on other machines: on this 2-core box it yields the CPU
    # to the pipeline under test (the achieved rate is reported, so a starved load shows).
    os.nice(10)
    started.set()
    sent.value = produce_heartbeats(
        settings, topic, LOAD_DEVICES, 0, rate=rate, seconds=seconds, stop=stop, step_s=step_s
    )
