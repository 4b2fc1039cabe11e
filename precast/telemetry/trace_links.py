"""The trace contexts a span over many records continues: a worker's micro-batch answers many
input events, an auditor's leaf batch holds many predictions. Such a span has one parent at
most and a link to every input (docs/observability.md, "Traces").

The parent is the first input whose trace is sampled, so the batch joins that answer's trace
and is kept whenever one of its inputs is (ParentBased sampling follows the parent); every
valid input is also a link, sampled ones first, at most `cap` of them (a span with thousands of
links is refused or truncated by most backends). A malformed `traceparent` is counted by
`checked` and simply not linked; the record itself is processed as ever."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from operator import methodcaller

from precast.kafka.types import KafkaMessage
from precast.telemetry.tracing import TRACEPARENT, TraceParent, checked

# The common case, a well-formed version-00 value, is recognised by one match; anything else
# goes through `checked` (later versions, and counting what is malformed).
_V00 = re.compile(rb"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})\Z")
_HEADERS = methodcaller("headers")
LINKS_MAX = 128


@dataclass(frozen=True, slots=True)
class Contexts:
    parent: TraceParent | None
    links: list[TraceParent]
    valid: int  # inputs with a usable context (links beyond `cap` are counted, not kept)


def record_contexts(msgs: Iterable[KafkaMessage], reader: str, cap: int = LINKS_MAX) -> Contexts:
    """The parent and links of a span over these records (their first `traceparent` each)."""
    sampled: list[TraceParent] = []
    other: list[TraceParent] = []
    valid = 0
    for headers in map(_HEADERS, msgs):
        if not headers:
            continue
        value = None
        for k, v in headers:
            if k == TRACEPARENT:
                value = v
                break
        if value is None:
            continue
        m = _V00.match(value) if isinstance(value, bytes) else None
        if m is not None:
            trace, span, flags = int(m[1], 16), int(m[2], 16), int(m[3], 16)
            if not (trace and span):
                checked(value, reader)  # an all-zero ID: counted
                continue
            p = TraceParent(trace, span, flags)
        else:
            got = checked(value, reader)
            if got is None:
                continue
            p = got
        valid += 1
        if p.flags & 1:
            if len(sampled) < cap:
                sampled.append(p)
        elif len(other) < cap:
            other.append(p)
    links = (sampled + other)[:cap]
    return Contexts(sampled[0] if sampled else None, links, valid)
