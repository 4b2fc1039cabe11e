"""What a shadow run replays with: the records' own clock (`ReplayClock`, `ClockedConsumer`),
slim references to records a throttled device waits with (`HeldRecord`, `slim`) and the
checkpoint file that lets a rerun continue (`Checkpointer`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from precast.errors import ConfigError
from precast.kafka import KafkaMessage, RecordRef, TopicPartitionOffset
from workers.precompute.ingest.trace import traceparent
from workers.precompute.items import Pending

CHECKPOINT_FORMAT = 1


class ReplayClock:
    """The newest record timestamp consumed so far: the policy's "now" during a shadow run."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


class ClockedConsumer:
    """The worker's consumer, advancing a `ReplayClock` with every batch it returns."""

    def __init__(self, consumer: Any, clock: ReplayClock) -> None:
        self._c, self._clock = consumer, clock

    def consume(self, n: int, timeout: float) -> list[KafkaMessage]:
        return self._advance(self._c.consume(n, timeout))

    def consume_available(self, n: int, timeout: float) -> list[KafkaMessage]:
        return self._advance(self._c.consume_available(n, timeout))

    def _advance(self, msgs: list[KafkaMessage]) -> list[KafkaMessage]:
        if msgs:
            newest = max(m.timestamp()[1] for m in msgs)
            if newest > self._clock.ms:
                self._clock.ms = newest
        return msgs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


class HeldRecord(RecordRef):
    """What a shadow run keeps of an input record while its device waits out a throttle
    window: where it came from and its trace id, for the lineage and the checkpoint offsets;
    not its payload or its other headers. A waiting device holds up to LINEAGE_MAX inputs, and
    a replay of records produced faster than the throttle window (any backfilled or benchmark
    topic) keeps nearly every device waiting: as whole KafkaMessages (~700 B each with payload
    and headers) that heap grew with the range (65 -> 100 MiB from 200k to 800k events of the
    same 40k devices) toward devices x LINEAGE_MAX x 700 B."""

    __slots__ = ()


def slim(
    item: Pending,
    topics: dict[str, str],
    attrs: dict[str, dict[str, str]],
    heartbeats: str,
    read: Callable[[bytes | None], dict[str, str]],
) -> None:
    """Replace the whole records a deferred item holds by `HeldRecord`s, in place; the
    device's attributes (what the comparison groups by) are read first from its heartbeat if
    not known yet (the payload goes). `topics` interns topic names (each consumed message
    carries its own copy)."""
    refs = item.refs
    for i, (m, eid) in enumerate(refs):
        if type(m) is HeldRecord:
            continue
        t = m.topic() or ""
        if item.device not in attrs and t == heartbeats:
            attrs[item.device] = read(m.value())
        refs[i] = (
            HeldRecord(
                topics.setdefault(t, t), m.partition() or 0, m.offset() or 0, traceparent(m)
            ),
            eid,
        )


class Checkpointer:
    """Where the run stands: per partition the next offset, the comparison so far, and the
    ranges the first run resolved. Saved atomically (temp file, fsync, rename)."""

    def __init__(self, path: Path, job: str, every_s: float) -> None:
        self.path, self.job, self.every_s = path, job, every_s
        self._next = time.monotonic() + every_s
        self.state: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"unreadable checkpoint {self.path}: {exc}; move it away or pass --fresh"
            ) from None
        if raw.get("format") != CHECKPOINT_FORMAT or raw.get("job") != self.job:
            raise ConfigError(
                f"checkpoint {self.path} belongs to another shadow run; use --fresh to start over"
            )
        self.state = raw
        return raw

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def save(
        self,
        positions: dict[tuple[str, int], int],
        assignment: Sequence[TopicPartitionOffset],
        comparison: dict[str, Any],
        complete: bool,
    ) -> None:
        """Where to continue (the next offset of each assigned partition) and the comparison
        so far (`Comparison.to_dict()`)."""
        self._next = time.monotonic() + self.every_s
        state = dict(self.state or {})
        state["next"] = [
            [a.topic, a.partition, positions.get((a.topic, a.partition), a.offset)]
            for a in assignment
        ]
        state["comparison"] = comparison
        state["complete"] = complete
        self.write(state)

    def write(self, state: dict[str, Any]) -> None:
        state.update(format=CHECKPOINT_FORMAT, job=self.job, updated_at_ms=int(time.time() * 1000))
        self.state = state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


# -- context as it was at the range's start ------------------------------------------------------
