"""The worker loop: consume a batch -> decode -> features -> one inference call -> produce ->
flush -> commit. Offsets are committed only after the batch's predictions are acknowledged."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson
from prometheus_client import Counter, Histogram

from precast.kafka import Consumer, KafkaMessage, Producer, TopicPartitionOffset
from schemas.fleet import LATEST_FIRMWARE
from schemas.topics import Topics
from workers.features import EMPTY_CONTEXT, build_features, device_type_index
from workers.inference import ModelSession
from workers.topk import top_k

log = logging.getLogger("precast.workers")

EVENTS_IN = Counter("precast_worker_events_total", "events consumed", ["topic"])
REJECTED = Counter("precast_worker_rejected_total", "records that could not be decoded", ["reason"])
PREDICTIONS = Counter("precast_worker_predictions_total", "predictions produced", ["model_version"])
BATCH_SIZE = Histogram("precast_worker_batch_size", "records per inference batch",
                       buckets=(1, 8, 32, 128, 512, 1024, 2048, 4096, 8192))
INFER_S = Histogram("precast_worker_inference_seconds", "model time per batch",
                    buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1))


@dataclass
class Decoded:
    device_ids: list[str]
    event_time_ms: list[int]
    cols: dict[str, np.ndarray]
    lineage: list[dict]


def decode_heartbeats(msgs: list[KafkaMessage], on_reject: Callable[[KafkaMessage, str], None]) -> Decoded:
    """Columns for `build_features` from raw heartbeat records (per-batch, not per-field work)."""
    ids, times, lineage, rows = [], [], [], []
    for m in msgs:
        try:
            e = orjson.loads(m.value())
            mt = e["metrics"]
            rows.append((mt["cpu_pct"], mt["mem_pct"], mt["temperature_c"], mt["error_rate"],
                         mt["signal_quality"], mt["uptime_s"],
                         1.0 if LATEST_FIRMWARE.get(e["device_type"]) == e["firmware"] else 0.0,
                         device_type_index(e["device_type"])))
            ids.append(e["device_id"])
            times.append(int(e["event_time_ms"]))
            lineage.append({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                            "event_id": e.get("event_id")})
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            on_reject(m, type(exc).__name__)
    arr = np.array(rows, dtype=np.float64).reshape(-1, 8)
    names = ("cpu_pct", "mem_pct", "temperature_c", "error_rate", "signal_quality", "uptime_s",
             "firmware_is_latest", "device_type_idx")
    cols = {k: arr[:, i] for i, k in enumerate(names)}
    cols["device_type_idx"] = cols["device_type_idx"].astype(np.int64)
    for k, v in EMPTY_CONTEXT.items():
        cols[k] = np.full(len(ids), v)
    return Decoded(ids, times, cols, lineage)


def next_offsets(msgs: list[KafkaMessage]) -> list[TopicPartitionOffset]:
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic(), m.partition())
        off = m.offset()
        if off is not None and off + 1 > last.get(key, -1):
            last[key] = off + 1
    return [TopicPartitionOffset(t, p, o) for (t, p), o in last.items()]


class Worker:
    def __init__(self, consumer: Consumer, producer: Producer, model: ModelSession, topics: Topics,
                 *, batch_max: int, poll_timeout_s: float, horizon_s: float, top_k: int = 3) -> None:
        self.consumer, self.producer, self.model, self.topics = consumer, producer, model, topics
        self.batch_max, self.poll_timeout_s = batch_max, poll_timeout_s
        self.horizon_ms = int(horizon_s * 1000)
        self.k = top_k
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.running = True
        self.last_loop = time.monotonic()

    def _reject(self, msg: KafkaMessage, reason: str) -> None:
        REJECTED.labels(reason).inc()
        log.warning("skipping undecodable record %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), reason)

    def run_once(self) -> int:
        msgs = self.consumer.consume(self.batch_max, self.poll_timeout_s)
        self.last_loop = time.monotonic()
        if not msgs:
            return 0
        EVENTS_IN.labels(self.topics.heartbeats.name).inc(len(msgs))
        batch = decode_heartbeats(msgs, self._reject)
        n = len(batch.device_ids)
        if n:
            t0 = time.perf_counter()
            probs = self.model.predict(build_features(batch.cols))
            INFER_S.observe(time.perf_counter() - t0)
            BATCH_SIZE.observe(n)
            idx, scores = top_k(probs, self.k)
            labels = self.model.labels
            now_ms = int(time.time() * 1000)
            topic = self.topics.predictions.name
            for j in range(n):
                computed = batch.event_time_ms[j]
                value = orjson.dumps({
                    "schema_version": 1,
                    "device_id": batch.device_ids[j],
                    "candidates": [{"strategy": labels[c], "score": round(float(s), 6)}
                                   for c, s in zip(idx[j], scores[j], strict=True)],
                    "model_version": self.model.version,
                    "computed_at_ms": computed,
                    "valid_until_ms": computed + self.horizon_ms,
                    "produced_at_ms": now_ms,
                    "trigger": "heartbeat",
                    "lineage": [batch.lineage[j]],
                })
                self.producer.produce(topic, batch.device_ids[j].encode(), value)
            PREDICTIONS.labels(self.model.version).inc(n)
        # At-least-once: the batch's outputs are acknowledged before its offsets are committed.
        self.producer.flush()
        self.consumer.commit(next_offsets(msgs))
        return len(msgs)

    def run(self) -> None:
        self.consumer.subscribe([self.topics.heartbeats.name])
        while self.running:
            self.run_once()
