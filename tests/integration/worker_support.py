"""Helpers for worker integration tests: worker processes, a load generator, and reading
predictions back with their lineage."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import orjson

from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from producers.publisher import TraceIds
from schemas.leases import is_lease_key
from tests.worker_events import alarm, heartbeat, request, work_order

ROOT = Path(__file__).resolve().parents[2]
_TRACE = TraceIds(seed=4).new


def wait_ready(port: int, timeout: float = 60.0) -> dict:
    """Poll a worker's /readyz until it answers 200 (assigned, context restored)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return orjson.loads(r.read())
        except (OSError, urllib.error.HTTPError):
            time.sleep(0.2)
    raise TimeoutError(f"worker on port {port} not ready within {timeout}s")


def spawn_worker(kafka_settings, topics, group: str, log: Path, **env: str) -> subprocess.Popen:
    e = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.heartbeats.partitions),
        "PRECAST_WORKER__GROUP_ID": group,
        "PRECAST_MODEL__PROVIDER": "cpu",
        "PRECAST_POLICY__THROTTLE_MS": "0",
        "PRECAST_POLICY__MIN_CHANGE": "0",
        # Every fresh heartbeat predicts: these tests follow each input into a prediction's
        # lineage (the answer-aware policy would rightly skip most of them).
        "PRECAST_POLICY__EVERY_EVENT": "true",
        # A prediction names at most LINEAGE_MAX (64) inputs: past that the oldest heartbeats of
        # its device are left out (superseded, by design), and a test could not tell them from
        # a lost trigger. With the Load's 300 devices, 2,000 records per consume keep every
        # device well under it even when a survivor catches up on a backlog after a kill.
        "PRECAST_WORKER__CONSUME_MAX": "2000",
        "PRECAST_LOG_LEVEL": "INFO",
        **env,
    }
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "workers.precompute.cli"],
            env=e,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


class Load(threading.Thread):
    """Heartbeats for `devices` devices at about `rate`/s for `seconds`, with a work order, an
    alarm and (after the first round) a precompute request mixed in every `every` heartbeats. Event times increase
    per device, so with every_event and no throttle every record is a trigger."""

    def __init__(
        self, kafka_settings, topics, *, devices=300, rate=2_000, seconds=6.0, every=50
    ) -> None:
        super().__init__(daemon=True)
        self.p = Producer(kafka_settings)
        self.topics, self.devices, self.rate, self.seconds, self.every = (
            topics,
            devices,
            rate,
            seconds,
            every,
        )
        self.sent = 0
        self.sent_to: Counter[str] = Counter()  # per topic
        self.error: BaseException | None = None

    def _send(self, topic: str, event: dict) -> None:
        self.p.produce(
            topic, event["device_id"].encode(), orjson.dumps(event), [("traceparent", _TRACE())]
        )
        self.sent += 1
        self.sent_to[topic] += 1

    def run(self) -> None:
        try:
            # event time steps 1 ms per record, faster than the clock: start far enough back
            # that none lies in the future (a worker dead-letters those)
            t0 = int(time.time() * 1000) - int(self.seconds * self.rate) - 1_000
            start, i = time.monotonic(), 0
            while time.monotonic() - start < self.seconds:
                for _ in range(max(1, self.rate // 20)):
                    d, t = f"dev-{i % self.devices:05d}", t0 + i
                    self._send(self.topics.heartbeats.name, heartbeat(d, t, cpu_pct=float(i % 100)))
                    if i % self.every == 0:
                        self._send(self.topics.work_orders.name, work_order(d, t, f"wo-{i}"))
                        self._send(self.topics.alarms.name, alarm(d, t, f"al-{i}"))
                        if i >= self.devices:  # for a device with data (a worker answers
                            # no other), not this one: its alarm must not merge into the request
                            other = f"dev-{(i - 1) % self.devices:05d}"
                            self._send(self.topics.precompute_requests.name, request(other, t))
                    i += 1
                self.p.poll(0)
                time.sleep(0.05)
            self.p.flush()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc


def input_offsets(kafka_settings, topics, group: str) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) on the worker's input topics right now."""
    c = Consumer(kafka_settings, group)
    out = set()
    for t in (topics.heartbeats, topics.work_orders, topics.alarms, topics.precompute_requests):
        for p in range(t.partitions):
            low, high = c.watermarks(t.name, p)
            out.update((t.name, p, o) for o in range(low, high))
    c.close()
    return out


def read_predictions(
    kafka_settings,
    topic: str,
    partitions: int,
    group: str,
    *,
    committed_only: bool,
    until=lambda preds: False,
    timeout: float = 60.0,
    quiet_s: float = 2.0,
) -> list[dict]:
    """Every prediction record (plus its partition/offset), reading until `until(preds)` holds
    and nothing new arrived for `quiet_s`, or `timeout`."""
    iso = "read_committed" if committed_only else "read_uncommitted"
    c = Consumer(kafka_settings, group, **{"isolation.level": iso})
    c.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    preds: list[dict] = []
    deadline, last_new = time.monotonic() + timeout, time.monotonic()
    while time.monotonic() < deadline:
        msgs = c.consume(5_000, 0.2)
        for m in msgs:
            if is_lease_key(m.key()):  # a partition's validity lease, not a prediction
                continue
            preds.append(
                {**orjson.loads(m.value()), "_partition": m.partition(), "_offset": m.offset()}
            )
        if msgs:
            last_new = time.monotonic()
        elif time.monotonic() - last_new > quiet_s and until(preds):
            break
    c.close()
    return preds


def read_until_answered(
    kafka_settings, topics, inputs: set, group: str, *, committed_only: bool, timeout: float
) -> tuple[set, set, list[dict]]:
    """(triggers, requests, predictions): `inputs` split into precompute requests and the other
    triggers, and the predictions read until every other trigger is in some lineage (or
    `timeout`). A request consumed before any data of its device is answered by nothing (no
    data, no prediction: docs/workers.md), and Kafka orders no two topics, so requests are
    checked apart (`assert_answered`)."""
    requests = {x for x in inputs if x[0] == topics.precompute_requests.name}
    triggers = inputs - requests
    preds = read_predictions(
        kafka_settings,
        topics.predictions.name,
        topics.predictions.partitions,
        group,
        committed_only=committed_only,
        until=lambda preds: triggers <= set(lineage_refs(preds)),
        timeout=timeout,
    )
    return triggers, requests, preds


def assert_answered(triggers: set, requests: set, refs: set, explain=None) -> None:
    """Every trigger is in some prediction's lineage, and most requests are (those of devices
    that had data by then). `explain(missing) -> str` adds detail to a failure."""
    missing = triggers - refs
    assert not missing, (
        f"{len(missing)} triggers without a prediction, e.g. {sorted(missing)[:5]}"
        + (f"\n{explain(missing)}" if explain is not None else "")
    )
    answered = len(requests & refs)
    assert answered == len(requests) > 0, f"{answered} of {len(requests)} requests answered"


def explain_missing(kafka_settings, missing: set, preds: list[dict], limit: int = 5) -> str:
    """For a failure message: each of the first `limit` unanswered inputs (its device and event
    time) beside every prediction of that device (partition, trigger, computed_at and the
    lineage offsets on the input's partition), to tell a lost input from a skipped one."""
    c = Consumer(kafka_settings, f"explain-{time.monotonic_ns()}")
    lines = []
    try:
        for topic, part, off in sorted(missing)[:limit]:
            c.assign([TopicPartitionOffset(topic, part, off)])
            msgs = c.consume(1, 10.0)
            if not msgs:
                lines.append(f"{topic}[{part}]@{off}: not readable")
                continue
            event = orjson.loads(msgs[0].value())
            device = event["device_id"]
            lines.append(
                f"{topic}[{part}]@{off}: {device} at {event['event_time_ms']}; its predictions:"
            )
            for p in preds:
                if p["device_id"] == device:
                    offs = [
                        r["offset"]
                        for r in p["lineage"]
                        if (r["topic"], r["partition"]) == (topic, part)
                    ]
                    lines.append(
                        f"  [{p['_partition']}]@{p['_offset']} {p['trigger']} "
                        f"computed_at {p['computed_at_ms']} lineage offsets {offs}"
                    )
    finally:
        c.close()
    return "\n".join(lines)


def lineage_refs(preds: list[dict]) -> list[tuple[str, int, int]]:
    """The inputs that triggered predictions (not the state a prediction was also computed from)."""
    return [
        (r["topic"], r["partition"], r["offset"])
        for p in preds
        for r in p["lineage"]
        if not r.get("state")
    ]


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    proc.terminate()
    return proc.wait(timeout)


def superseded(kafka_settings, missing: set, preds: list[dict], topics: set[str]) -> set:
    """The inputs of `missing` (on `topics`) that a newer record of the same device and topic,
    named in one of `preds`, supersedes: what lineage truncation leaves out by design
    (LINEAGE_MAX: the oldest heartbeats first, then the oldest events; counted in
    precast_worker_lineage_truncated_total), as opposed to an input nobody predicted."""
    wanted = {(t, p, o) for t, p, o in missing if t in topics}
    if not wanted:
        return set()
    newest: dict[tuple[str, int, str], int] = {}  # (topic, partition, device) -> newest named
    for pred in preds:
        for r in pred["lineage"]:
            if r["topic"] in topics:
                k = (r["topic"], r["partition"], pred["device_id"])
                newest[k] = max(newest.get(k, -1), r["offset"])
    c = Consumer(kafka_settings, f"superseded-{time.monotonic_ns()}")
    out = set()
    try:
        for topic, part in sorted({(t, p) for t, p, _ in wanted}):
            left = {o for t, p, o in wanted if (t, p) == (topic, part)}
            c.assign([TopicPartitionOffset(topic, part, min(left))])
            deadline = time.monotonic() + 30
            while left and time.monotonic() < deadline:
                for m in c.consume(1000, 1.0):
                    if m.offset() in left:
                        left.discard(m.offset())
                        device = orjson.loads(m.value())["device_id"]
                        if newest.get((topic, part, device), -1) > m.offset():
                            out.add((topic, part, m.offset()))
    finally:
        c.close()
    return out
