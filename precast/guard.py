"""The one decode boundary every reader puts between itself and the bytes it reads.

A topic, a file or a client can hold any bytes: not JSON, nesting past any recursion limit,
huge or non-finite numbers, wrong types anywhere, invalid UTF-8, megabyte values, null keys,
tombstones, headers of any bytes. A reader's contract-aware decoder rejects what it expects to
see broken; what it does not expect raises whatever the library under it raises
(`RecursionError`, `OverflowError`, `UnicodeDecodeError`, `TypeError`, ...). Either way the
record ends here as a counted rejection, never a stopped thread:

- `precast_records_rejected_total{reader, reason}` counts it;
- one bounded log line per reader and reason a minute, with how many were not logged;
- a dead letter with its reason, where the reader has a dead-letter topic.

Only `Exception` is caught: `KeyboardInterrupt` and `SystemExit` still stop the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from prometheus_client import Counter

from precast.hygiene import printable
from precast.kafka import KafkaMessage
from schemas.deadletters import Reason

T = TypeVar("T")

REJECTED = Counter(
    "precast_records_rejected_total",
    "records a reader could not use (each also dead-lettered where the reader has a topic)",
    ["reader", "reason"],
)

# One log line per (reader, reason) in this many seconds; the next says how many it skipped.
LOG_EVERY_S = 60.0


class DeadLetterSink(Protocol):
    """Where a guard sends what it rejects: `precast.deadletter.DeadLetters` (a producer of
    its own) or a reader's own path (a worker's transactional sink)."""

    def send(self, msg: KafkaMessage, reason: Reason, detail: str = "") -> None: ...


class Unusable(ValueError):
    """Raised by a reader's own decoder for a record it understands to be broken."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def classify(exc: BaseException) -> tuple[Reason, str]:
    """(dead-letter reason, one-line detail) for whatever a decoder raised."""
    reason = getattr(exc, "reason", None)
    detail = getattr(exc, "detail", None)
    if isinstance(reason, Reason):
        return reason, printable(detail if isinstance(detail, str) else exc, 300)
    if isinstance(exc, RecursionError):
        return Reason.INVALID, "nested too deeply to decode"
    if isinstance(exc, MemoryError):
        return Reason.OVERSIZED, "too large to decode"
    if isinstance(exc, UnicodeError):
        return Reason.NOT_JSON, f"not UTF-8: {printable(exc, 200)}"
    name = type(exc).__name__
    if "Decode" in name or "JSON" in name:  # msgspec.DecodeError, orjson.JSONDecodeError, ...
        return Reason.NOT_JSON, printable(exc, 300)
    return Reason.INVALID, f"{name}: {printable(exc, 280)}"


class Guard:
    """A reader's boundary: `decode(fn, msg)` returns `fn(msg)` or None after `reject`.

    `reader` names the process and what it reads ("api-materializer", "auditor", ...); it is
    the metric's label and the dead letter's component."""

    def __init__(
        self,
        reader: str,
        log: logging.Logger,
        dead: DeadLetterSink | None = None,
        *,
        log_every_s: float = LOG_EVERY_S,
    ) -> None:
        self.reader, self._log, self._dead, self._every = reader, log, dead, log_every_s
        self._last: dict[Reason, float] = {}
        self._skipped: dict[Reason, int] = {}
        self._lock = threading.Lock()
        self._counters: dict[Reason, Any] = {}
        self.rejected = 0

    def decode(self, fn: Callable[[KafkaMessage], T], msg: KafkaMessage) -> T | None:
        try:
            return fn(msg)
        except Exception as exc:  # noqa: BLE001 - the boundary: anything a record can cause
            self.reject(exc, msg)
            return None

    def reject(
        self, exc: BaseException, msg: KafkaMessage | None = None, *, dead_letter: bool = True
    ) -> Reason:
        """Count, log (bounded) and dead-letter one unusable record; returns its reason.
        `dead_letter=False` for a record met again (a replay of what was dead-lettered)."""
        reason, detail = classify(exc)
        self.rejected += 1
        counter = self._counters.get(reason)
        if counter is None:  # labels() costs more than the rest of a count: once per reason
            counter = self._counters[reason] = REJECTED.labels(self.reader, reason.value)
        counter.inc()
        self._note(reason, detail, msg)
        if dead_letter and msg is not None and self._dead is not None:
            self._dead.send(msg, reason, detail)
        return reason

    def _note(self, reason: Reason, detail: str, msg: KafkaMessage | None) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(reason)
            if last is not None and now - last < self._every:
                self._skipped[reason] = self._skipped.get(reason, 0) + 1
                return
            self._last[reason] = now
            skipped = self._skipped.pop(reason, 0)
        where = ""
        if msg is not None:
            where = f" at {printable(msg.topic(), 80)}[{msg.partition()}]@{msg.offset()}"
        more = f" ({skipped} more of this reason since the last line)" if skipped else ""
        self._log.warning(
            "%s: record rejected%s: %s: %s%s", self.reader, where, reason, detail, more
        )
