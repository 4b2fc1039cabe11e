"""The gate: a process of its own between the predictions topic and a replica's materializer,
below the reads' CPU priority, that takes the poison off the read path.

A read API replica serves reads and materializes in one Python process, so every microsecond
the materializer spends on a record is one a read may wait for the GIL. Valid answers are what
the view exists for, but a burst of records it cannot use (a hostile or broken writer) cost the
reads as much again, for nothing. The gate reads the topic in their place: it decodes each record
as the materializer would, rejects and dead-letters what is not a prediction or a lease (with
`precast.guard`, component `api-materializer`), and passes on only the rest, with each
partition's position, through a pipe (consumer_api.materialize.wire). Its rejections are counted
here and added to the parent's counters (precast.telemetry.relay), so `/metrics` of the replica
shows them as before.

The gate starts a session of its own and runs, with its session's scheduling group, at the
replica's background priority (PRECAST_API__BACKGROUND_NICE, precast.priority). Being a process
of its own, it never holds the reads' GIL, and runs on whichever of the replica's cores is free;
on a core the reads keep busy it still takes its share of it (docs/api.md, The gate). It
ends when its parent closes the pipe or dies (the pipe's end is seen within one poll,
`wait_s`), after up to STOP_FLUSH_S for its queued dead letters. The parent starts it again when it stops
(consumer_api.materialize.gated).

Started by its parent only (`gate_command`, lowered before any thread starts, so librdkafka's
threads inherit its priority): its settings come as the first frame on stdin, not
from the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from consumer_api.materialize.letters import letters_producer
from consumer_api.materialize.materializer import APPLIED, STOP_FLUSH_S, record_traceparent
from consumer_api.materialize.source import high_watermark, topic_consumer
from consumer_api.materialize.wire import GateClosed, Pipe
from precast.deadletter import DEAD_LETTERS, DeadLetters
from precast.guard import REJECTED, Guard
from precast.hygiene import printable
from precast.kafka import Consumer, KafkaMessage, Producer, TopicPartitionOffset
from precast.kafka.producer import DELIVERY_FAILURES
from precast.runtime import setup_logging
from precast.serving import lease_from_record, prediction_item
from precast.settings import KafkaSettings
from precast.telemetry.relay import CounterRelay
from schemas import deadletters as dl
from schemas.leases import is_lease_key

log = logging.getLogger("precast.api.gate")

# Positions of records it rejected go to the parent at most this often (its lag and readiness
# move with them): a burst of poison costs the parent a few wake-ups a second, not one a poll.
POSITIONS_EVERY_S = 0.1


def gate_command(nice: int) -> str:
    """The `python -c` program of a gate: lowered before anything else (its imports take half a
    second of CPU), then `main`. Not `-m` on this module: its package imports it first, and a
    second copy as __main__ would hold another GateConfig class than the one the parent sent."""
    return (
        "import sys; from precast.priority import lower_session, lower_this_thread; "
        f"lower_session({int(nice)}); lower_this_thread({int(nice)}); "
        "from consumer_api.materialize.gate import main; sys.exit(main())"
    )


IDLE_WAIT_S = 0.5  # before the first assignment: how often it looks for its parent's end
RELAYED = (APPLIED, REJECTED, DEAD_LETTERS, DELIVERY_FAILURES)
_INVALID = APPLIED.labels("invalid")
_TOMBSTONE = APPLIED.labels("tombstone")


@dataclass(frozen=True)
class GateConfig:
    kafka: KafkaSettings
    topic: str
    group_id: str  # the replica's consumer group: the gate reads in its place
    dead_letter_topic: str | None
    batch: int
    wait_s: float
    nice: int = 10
    log_level: str = "INFO"


class Gate:
    """The gate's loop: requests from the parent between polls, records passed on or rejected."""

    def __init__(
        self,
        conf: GateConfig,
        pipe: Pipe,
        consumer: Consumer,
        producer: Producer | None,
        relay: CounterRelay | None = None,
    ) -> None:
        self.conf, self._pipe, self._consumer, self._producer = conf, pipe, consumer, producer
        dead = (
            DeadLetters(
                producer, conf.dead_letter_topic, "api-materializer", preview_bytes=dl.PREVIEW_BYTES
            )
            if producer is not None and conf.dead_letter_topic
            else None
        )
        self.guard = Guard("api-materializer", log, dead)
        self.relay = relay or CounterRelay(RELAYED)
        self._epoch = 0  # the parent's assignment this reading belongs to (0: none yet)
        self._live_from: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        self._sent_at = 0.0

    def serve(self) -> None:
        """Until the parent says stop or its end closes (GateClosed)."""
        while self._requests():
            if not self._epoch:
                continue
            self.pass_on(self._consumer.consume_available(self.conf.batch, self.conf.wait_s))
            if self._producer is not None and self._producer.pending():
                self._producer.poll(0)  # delivery reports only (consumer_api.materialize.letters)

    def _requests(self) -> bool:
        wait = 0.0 if self._epoch else IDLE_WAIT_S
        while self._pipe.ready(wait):
            frame = self._pipe.recv()
            if frame[0] == "assign":
                _, self._epoch, positions, self._live_from = frame
                self._ends = {}
                self._consumer.assign(
                    [TopicPartitionOffset(self.conf.topic, p, o) for p, o in positions.items()]
                )
            elif frame[0] == "marks":
                self._pipe.send(self._marks(frame[1], frame[2]))
            elif frame[0] == "stop":
                return False
            wait = 0.0
        return True

    def _marks(self, request: int, partitions: int) -> tuple[Any, ...]:
        try:
            marks = {
                p: high_watermark(self._consumer, self.conf.topic, p) for p in range(partitions)
            }
        except Exception as exc:  # noqa: BLE001 - the parent raises it where it asked
            return ("marks", request, None, f"{type(exc).__name__}: {printable(exc, 300)}")
        return ("marks", request, marks, "")

    def pass_on(self, msgs: list[KafkaMessage]) -> None:
        now = int(time.time() * 1000)
        out: list[tuple[int, int, bytes | None, bytes, bytes | None]] = []
        ends, live_from = self._ends, self._live_from
        for m in msgs:
            p, offset, value = m.partition(), m.offset(), m.value()
            ends[p] = offset + 1
            if not value:
                _TOMBSTONE.inc()  # no timestamps: cannot take part in newest-wins
                continue
            try:
                key = m.key()
                if is_lease_key(key):
                    lease_from_record(value, key, now, offset)
                else:
                    prediction_item(value, now, key)
            except Exception as bad:  # noqa: BLE001 - whatever a record causes
                _INVALID.inc()
                self.guard.reject(bad, m, dead_letter=offset >= live_from.get(p, 0))
                continue
            out.append((p, offset, key, value, record_traceparent(m)))
        # Positions and counts of rejected records go at most every POSITIONS_EVERY_S (a count
        # costs ~35 us to collect); answers go at once.
        mono = time.monotonic()
        due = mono - self._sent_at >= POSITIONS_EVERY_S
        deltas = self.relay.deltas() if due else {}
        if out or (due and (ends or deltas)):
            self._pipe.send(("batch", self._epoch, out, ends, deltas))
            self._ends = {}
        if due:
            self._sent_at = mono


def main() -> int:
    # Frames go out on a copy of stdout; fd 1 becomes stderr, so a stray print cannot break one.
    pipe = Pipe(0, os.dup(1))
    os.dup2(2, 1)
    try:
        kind, conf = pipe.recv()
    except GateClosed:
        return 0
    assert kind == "config" and isinstance(conf, GateConfig)
    setup_logging(conf.log_level)
    consumer = topic_consumer(conf.kafka, conf.group_id)
    producer = letters_producer(conf.kafka) if conf.dead_letter_topic else None
    try:
        Gate(conf, pipe, consumer, producer).serve()
    except GateClosed:
        pass  # the parent is gone: nothing to pass on to
    except Exception as exc:  # noqa: BLE001 - said to the parent, which starts a fresh gate
        log.error("gate stopped: %s: %s", type(exc).__name__, printable(exc, 300))
        with contextlib.suppress(GateClosed):
            pipe.send(("failed", f"{type(exc).__name__}: {printable(exc, 300)}"))
        return 1
    finally:
        consumer.close()
        if producer is not None and producer.pending():
            try:
                producer.flush(STOP_FLUSH_S)
            except Exception as exc:  # noqa: BLE001 - stopping: say what was not confirmed
                log.warning("dead letters not confirmed at stop: %s", exc)
    return 0
