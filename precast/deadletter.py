"""The dead-letter helper every consumer uses: a rejected record is never dropped and never
crashes the consumer; it goes to the dead-letter topic with its original bytes and the reason
(or, for a reader that bounds its letters, a preview of a long value: `schemas.deadletters`)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from precast.kafka import KafkaMessage, Producer
from schemas import deadletters as dl
from schemas.validation import Rejected

DEAD_LETTERS = Counter(
    "precast_dead_letters_total", "records sent to the dead-letter topic", ["component", "reason"]
)


class DeadLetters:
    """`send(msg, reason, detail)` produces the dead letter; the caller flushes its producer
    before committing the source offset, so a dead letter is as durable as any output.

    `preview_bytes`: cut values longer than this to a preview (None: copy every value whole)."""

    def __init__(
        self, producer: Producer, topic: str, component: str, *, preview_bytes: int | None = None
    ) -> None:
        self._producer, self.topic, self.component = producer, topic, component
        self._preview = preview_bytes
        self._counted: dict[dl.Reason, Any] = {}  # labels() costs more than the count itself

    def send(self, msg: KafkaMessage, reason: dl.Reason, detail: str = "") -> None:
        key, value, headers = dead_letter_record(
            msg, reason, detail, self.component, preview_bytes=self._preview
        )
        self._producer.produce(self.topic, key, value, headers)
        counter = self._counted.get(reason)
        if counter is None:
            counter = self._counted[reason] = DEAD_LETTERS.labels(self.component, reason.value)
        counter.inc()

    def send_rejected(self, msg: KafkaMessage, rejected: Rejected) -> None:
        """Dead-letter a record `schemas.validation.validate_event` rejected."""
        self.send(msg, rejected.reason, rejected.detail)


class RejectLetters:
    """Dead letters through a reader's own reject callback `(msg, reason, detail)` (a worker's
    transactional sink, a test's list), for `precast.guard.Guard` (any `send` will do there:
    `precast.guard.DeadLetterSink`)."""

    def __init__(self, reject: Callable[[KafkaMessage, dl.Reason, str], None]) -> None:
        self._reject = reject

    def send(self, msg: KafkaMessage, reason: dl.Reason, detail: str = "") -> None:
        self._reject(msg, reason, detail)


def dead_letter_record(
    msg: KafkaMessage,
    reason: dl.Reason,
    detail: str,
    component: str,
    *,
    preview_bytes: int | None = None,
) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
    """(key, value, headers) of the dead letter for `msg`, for producers other than ours
    (the faust-based context aggregator sends it with its own producer). With `preview_bytes`,
    a longer value is cut to its first `preview_bytes`, with its size and SHA-256 in headers."""
    key = msg.key()
    value = msg.value()
    ts = msg.timestamp()
    headers = list(msg.headers() or [])
    headers += [
        (dl.H_REASON, reason.value.encode()),
        (dl.H_DETAIL, detail[: dl.MAX_DETAIL].encode(errors="replace")),
        (dl.H_COMPONENT, component.encode()),
        (dl.H_TOPIC, (msg.topic() or "").encode()),
        (dl.H_PARTITION, str(msg.partition()).encode()),
        (dl.H_OFFSET, str(msg.offset()).encode()),
        (dl.H_TIMESTAMP, str(ts[1] if ts else -1).encode()),
        (dl.H_REJECTED_AT, str(int(time.time() * 1000)).encode()),
    ]
    if not key:
        headers.append((dl.H_KEY_MISSING, dl.KEY_WAS_NULL if key is None else dl.KEY_WAS_EMPTY))
    if preview_bytes is not None and value is not None and len(value) > preview_bytes:
        headers += [
            (dl.H_TRUNCATED, dl.TRUNCATED),
            (dl.H_VALUE_SIZE, str(len(value)).encode()),
            (dl.H_VALUE_SHA256, hashlib.sha256(value).hexdigest().encode()),
        ]
        value = value[:preview_bytes]
    return key or dl.MISSING_KEY, value, headers


def dead_letter_info(headers: list[tuple[str, bytes]] | None) -> dict[str, str]:
    """The `dlq.*` headers of a dead letter as text, keyed without the prefix. Anyone who can
    write the topic writes its headers too: a value may be None (read as "") or any bytes."""
    return {
        k.removeprefix(dl.HEADER_PREFIX): v.decode(errors="replace") if isinstance(v, bytes) else ""
        for k, v in (headers or [])
        if isinstance(k, str) and k.startswith(dl.HEADER_PREFIX)
    }


@dataclass(frozen=True)
class Preview:
    """What a truncated dead letter says of the value it cut (from its headers, which anyone
    who can write the dead-letter topic writes too: a size that is not a number is None)."""

    kept: int
    size: int | None
    sha256: str
    source: str  # topic[partition]@offset, as the letter gives it

    def describe(self) -> str:
        """One line: what was kept and where the whole record is."""
        size = "?" if self.size is None else f"{self.size:,}"
        return (
            f"value cut to its first {self.kept:,} of {size} bytes (sha256 {self.sha256[:64]}); "
            f"the full record is at {self.source}"
        )


def is_truncated(info: dict[str, str]) -> bool:
    """Whether a letter's value is a preview (`info`: `dead_letter_info`)."""
    return info.get(dl.H_TRUNCATED.removeprefix(dl.HEADER_PREFIX)) == dl.TRUNCATED.decode()


def preview_of(value: bytes | None, info: dict[str, str]) -> Preview | None:
    """The letter's `Preview` when its value was cut (`info`: `dead_letter_info`), else None."""
    if not is_truncated(info):
        return None
    size = info.get(dl.H_VALUE_SIZE.removeprefix(dl.HEADER_PREFIX), "")
    source = (
        f"{info.get('source.topic', '?')}[{info.get('source.partition', '?')}]"
        f"@{info.get('source.offset', '?')}"
    )
    return Preview(
        len(value or b""),
        int(size) if size.isascii() and size.isdigit() else None,
        info.get(dl.H_VALUE_SHA256.removeprefix(dl.HEADER_PREFIX), "?"),
        source,
    )


def original_key(key: bytes | None, headers: list[tuple[str, bytes]] | None) -> bytes | None:
    """The key the record had before it was dead-lettered (None or b"" when it had none)."""
    missing = dict(headers or []).get(dl.H_KEY_MISSING)
    if missing is None:
        return key
    return b"" if missing == dl.KEY_WAS_EMPTY else None


def original_headers(headers: list[tuple[str, bytes]] | None) -> list[tuple[str, bytes]]:
    """The headers the record had before it was dead-lettered (for a redrive)."""
    return [(k, v) for k, v in (headers or []) if not k.startswith(dl.HEADER_PREFIX)]
