"""What part of a topic an SRE command works on: a UTC time range or per-partition offsets.

Parsing is pure (unit-tested); `resolve` asks the broker which offsets a time range covers.
Every range is half-open, `[start, end)`, in offsets and in time alike.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from precast.errors import ConfigError
from precast.kafka import Consumer, TopicPartitionOffset

_OFFSET_ITEM = re.compile(r"^\s*(\*|\d+)\s*:\s*(\d*)\s*-\s*(\d*)\s*$")


@dataclass(frozen=True)
class OffsetRange:
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class TimeRange:
    start_ms: int
    end_ms: int  # exclusive

    def contains(self, ts_ms: int) -> bool:
        return self.start_ms <= ts_ms < self.end_ms


def parse_time(text: str, flag: str = "time") -> int:
    """ISO 8601 to epoch milliseconds. `Z` or an explicit offset are honoured; a time without
    one is taken as UTC (the tools speak UTC only)."""
    raw = text.strip()
    try:
        t = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ConfigError(
            f"malformed {flag} {text!r}: expected ISO 8601 in UTC, e.g. 2025-01-31T04:00:00Z"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def format_time(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def parse_time_range(start: str, end: str | None, now_ms: int) -> TimeRange:
    s = parse_time(start, "--from")
    e = parse_time(end, "--to") if end else now_ms
    if e <= s:
        raise ConfigError(
            f"reversed or empty time range: --from {format_time(s)} is not before "
            f"--to {format_time(e)}"
        )
    return TimeRange(s, e)


@dataclass(frozen=True)
class OffsetSpec:
    """Parsed `--offsets`: per partition (or `*` for all) a start and end, either open."""

    items: tuple[tuple[int | None, int | None, int | None], ...]  # (partition|None=all, start, end)


def parse_offsets(text: str) -> OffsetSpec:
    """`P:START-END` items separated by commas, END exclusive and either side open:
    `0:100-200,1:50-`, `*:0-1000`."""
    items = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _OFFSET_ITEM.match(part)
        if not m:
            raise ConfigError(
                f"malformed --offsets item {part!r}: expected PARTITION:START-END "
                f"(END exclusive, either side may be left open), e.g. 0:100-200"
            )
        p, s, e = m.groups()
        start, end = (int(s) if s else None), (int(e) if e else None)
        if start is not None and end is not None and end < start:
            raise ConfigError(f"reversed offset range {part!r}: start {start} is after end {end}")
        items.append((None if p == "*" else int(p), start, end))
    if not items:
        raise ConfigError("empty --offsets: expected PARTITION:START-END items, e.g. 0:100-200")
    seen = [p for p, _, _ in items]
    if len(set(seen)) != len(seen) or (None in seen and len(seen) > 1):
        raise ConfigError(f"--offsets names a partition twice: {text!r}")
    return OffsetSpec(tuple(items))


def _watermarks(consumer: Consumer, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    return {p: consumer.watermarks(topic, p) for p in range(partitions)}


def resolve_offsets(
    consumer: Consumer, topic: str, partitions: int, spec: OffsetSpec
) -> list[OffsetRange]:
    """Clamp an offset spec to what the partitions hold now (open ends become the watermarks)."""
    marks = _watermarks(consumer, topic, partitions)
    out = []
    for p, start, end in spec.items:
        targets = range(partitions) if p is None else [p]
        if p is not None and not 0 <= p < partitions:
            raise ConfigError(
                f"partition {p} does not exist: {topic} has partitions 0-{partitions - 1}"
            )
        for q in targets:
            low, high = marks[q]
            s = low if start is None else max(start, low)
            e = high if end is None else min(end, high)
            out.append(OffsetRange(q, s, max(s, e)))
    return out


def resolve_times(
    consumer: Consumer, topic: str, partitions: int, tr: TimeRange
) -> list[OffsetRange]:
    """The offsets whose records may fall in the time range: from the first record at or after
    `start` to the first at or after `end` (the end of the partition when there is none)."""
    marks = _watermarks(consumer, topic, partitions)

    def first_at(ms: int) -> dict[int, int]:
        found = consumer.offsets_for_times(
            [TopicPartitionOffset(topic, p, ms) for p in range(partitions)]
        )
        return {t.partition: (t.offset if t.offset >= 0 else marks[t.partition][1]) for t in found}

    starts, ends = first_at(tr.start_ms), first_at(tr.end_ms)
    return [OffsetRange(p, starts[p], max(starts[p], ends[p])) for p in range(partitions)]


def describe(ranges: Sequence[OffsetRange]) -> str:
    return ", ".join(f"{r.partition}:{r.start}-{r.end}" for r in ranges)


def add_range_args(parser: Any, what: str = "records") -> None:
    parser.add_argument(
        "--from",
        dest="time_from",
        metavar="TIME",
        help=f"{what} at or after this UTC ISO 8601 time",
    )
    parser.add_argument(
        "--to", dest="time_to", metavar="TIME", help="UTC ISO 8601 end (exclusive); default now"
    )
    parser.add_argument(
        "--offsets",
        help="per-partition offsets P:START-END (END exclusive), e.g. 0:100-200,1:50-; "
        "'*:START-END' for every partition",
    )


def range_inputs(
    args: Any, *, default_all: bool = False
) -> tuple[TimeRange | None, OffsetSpec | None]:
    """The time range or offset spec a command was given (whole topic when allowed and neither)."""
    if args.offsets and (args.time_from or args.time_to):
        raise ConfigError("give a time range (--from/--to) or --offsets, not both")
    if args.time_to and not args.time_from:
        raise ConfigError("--to needs --from")
    if not args.offsets and not args.time_from:
        if default_all:
            return None, OffsetSpec(((None, None, None),))
        raise ConfigError("give a time range (--from [--to]) or --offsets")
    now = int(time.time() * 1000)
    tr = parse_time_range(args.time_from, args.time_to, now) if args.time_from else None
    return tr, (parse_offsets(args.offsets) if args.offsets else None)
