"""The trace contexts a span over many records continues: a worker's micro-batch answers many
input events, an auditor's leaf batch holds many predictions. Such a span has one parent at
most and a link to every input (docs/observability.md, "Traces").

The parent is the first input whose trace is sampled, so the batch joins that answer's trace
and is kept whenever one of its inputs is (ParentBased sampling follows the parent); every
valid input is also a link, sampled ones first, at most `cap` of them (a span with thousands of
links is refused or truncated by most backends). A malformed `traceparent` is counted by
`checked` and simply not linked; the record itself is processed as ever.

A worker with tracing on runs this over every input of every batch, so the common case (a
well-formed version-00 value) is checked for the whole batch at once with numpy and parsed
into integers only for the links kept; anything else goes through `checked`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import methodcaller

import numpy as np

from precast.kafka.types import KafkaMessage
from precast.telemetry.tracing import TRACEPARENT, TraceParent, checked

_HEADERS = methodcaller("headers")
_HEX = np.zeros(256, dtype=bool)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = True
_ODD = np.zeros(256, dtype=bool)  # the flags' low bit (sampled), read from its last hex digit
_ODD[np.frombuffer(b"13579bdf", dtype=np.uint8)] = True
_DIGITS = np.r_[0:2, 3:35, 36:52, 53:55]
LINKS_MAX = 128


@dataclass(frozen=True, slots=True)
class Contexts:
    parent: TraceParent | None
    links: list[TraceParent]
    valid: int  # inputs with a usable context (links beyond `cap` are counted, not kept)


def _parsed(v: bytes) -> TraceParent:
    return TraceParent(int(v[3:35], 16), int(v[36:52], 16), int(v[53:55], 16))


def _traceparent(headers: list[tuple[str, bytes]] | None) -> bytes | None:
    for k, v in headers or ():
        if k == TRACEPARENT:
            return v
    return None


def record_contexts(msgs: Iterable[KafkaMessage], reader: str, cap: int = LINKS_MAX) -> Contexts:
    """The parent and links of a span over these records (their first `traceparent` each)."""
    values = [v for v in map(_traceparent, map(_HEADERS, msgs)) if v is not None]
    well = [v for v in values if isinstance(v, bytes) and len(v) == 55]
    ok, sampled_rows = _checked_v00(well)
    sampled: list[TraceParent] = []
    other: list[TraceParent] = []
    for v, good, hot in zip(well, ok, sampled_rows, strict=True):
        if good:
            into = sampled if hot else other
            if len(into) < cap:
                into.append(_parsed(v))
    valid = sum(ok)
    # the rest: later versions, or malformed (`checked` counts those)
    rest = [v for v, good in zip(well, ok, strict=True) if not good]
    rest += [v for v in values if not (isinstance(v, bytes) and len(v) == 55)]
    for v in rest:
        p = checked(v, reader)
        if p is not None:
            valid += 1
            into = sampled if p.sampled else other
            if len(into) < cap:
                into.append(p)
    links = (sampled + other)[:cap]
    return Contexts(sampled[0] if sampled else None, links, valid)


def _checked_v00(values: list[bytes]) -> tuple[list[bool], list[bool]]:
    """(well-formed version 00, sampled) for 55-byte values, checked for all at once."""
    if not values:
        return [], []
    a = np.frombuffer(b"".join(values), dtype=np.uint8).reshape(len(values), 55)
    ok = (
        (a[:, 0] == 48)
        & (a[:, 1] == 48)
        & (a[:, 2] == 45)
        & (a[:, 35] == 45)
        & (a[:, 52] == 45)
        & _HEX[a[:, _DIGITS]].all(axis=1)
        & (a[:, 3:35] != 48).any(axis=1)
        & (a[:, 36:52] != 48).any(axis=1)
    )
    return ok.tolist(), _ODD[a[:, 54]].tolist()
