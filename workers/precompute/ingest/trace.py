"""Trace ids of input records (W3C `traceparent` headers) for the lineage of predictions,
checked for a whole batch at once with numpy."""

from __future__ import annotations

from collections.abc import Sequence
from operator import methodcaller

import numpy as np

from precast.kafka import KafkaMessage

_HEADERS = methodcaller("headers")
_HEX = np.zeros(256, dtype=bool)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = True


_SMALL = 32
_HEX_CHARS = b"0123456789abcdef"


def _trace_id_json(v: bytes | None) -> bytes:
    """One traceparent value checked like the batch path of `trace_ids_json`."""
    if v is None or len(v) != 55 or not v[2] == v[35] == v[52] == 45:
        return b"null"
    tid = v[3:35]
    return b"null" if tid.translate(None, _HEX_CHARS) or tid == b"0" * 32 else b'"' + tid + b'"'


def trace_ids_json(msgs: Sequence[KafkaMessage]) -> list[bytes]:
    """The trace id of each record's first `traceparent` header as JSON (`b'"<32 hex>"'`), or
    `b"null"` where it has none or an invalid one: version(2) - trace id(32 hex, not all zero) -
    parent id(16) - flags(2). Checked for the whole batch at once with numpy."""
    values: list[bytes | None] = [None] * len(msgs)
    for i, h in enumerate(map(_HEADERS, msgs)):
        if h:
            for k, v in h:
                if k == "traceparent":
                    values[i] = v
                    break
    if len(values) < _SMALL:  # numpy's fixed cost per call is more than a few records' checks
        return list(map(_trace_id_json, values))
    rows: list[int] = []
    found: list[bytes] = []
    for i, v in enumerate(values):
        if v is not None and len(v) == 55:
            rows.append(i)
            found.append(v)
    if not rows:
        return [b"null"] * len(values)
    a = np.frombuffer(b"".join(found), dtype=np.uint8).reshape(len(rows), 55)
    tid = a[:, 3:35]
    ok = (
        (a[:, 2] == 45)
        & (a[:, 35] == 45)
        & (a[:, 52] == 45)
        & _HEX[tid].all(axis=1)
        & (tid != 48).any(axis=1)
    )
    quoted = np.full((len(rows), 34), 34, dtype=np.uint8)  # '"' + trace id + '"'
    quoted[:, 1:33] = tid
    found = quoted.view("S34").ravel().tolist()
    if len(rows) == len(values) and ok.all():
        return found  # every record has a valid one (the common case)
    out = [b"null"] * len(values)
    for j in np.flatnonzero(ok).tolist():
        out[rows[j]] = found[j]
    return out


def traceparent(msg: KafkaMessage) -> bytes | None:
    """A record's first `traceparent` header value, unchecked (`trace_ids_json` inlines this
    lookup for whole batches)."""
    for k, v in msg.headers() or ():
        if k == "traceparent":
            return v if isinstance(v, bytes) else None
    return None


def trace_id(msg: KafkaMessage) -> str | None:
    """The trace id from one record's `traceparent` header, if it has a valid one."""
    q = trace_ids_json([msg])[0]
    return None if q == b"null" else q[1:-1].decode()
