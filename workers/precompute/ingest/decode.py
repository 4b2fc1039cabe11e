"""Records -> columns, for one fleet spec. Heartbeats take a typed fast path (`workers.
precompute.wire`: msgspec structs generated from the spec, column-wise checks at C speed) for
every wire style the contract tolerates; anything the fast path does not accept goes through the
contract validator, which names the reason for a rejection (and judges anything odd the same
way). Work orders, alarms and precompute requests are low-rate and always take the validator."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any

import msgspec
import numpy as np

from precast.fleet import Fleet
from precast.fleet.features import StateColumn
from precast.kafka import KafkaMessage
from schemas import events as ev
from schemas.deadletters import Reason
from schemas.events import MAX_EVENT_BYTES
from schemas.normalize import INT_TEXT, NUMBER_TEXT  # the contract's own number grammar
from schemas.spec.fields import Categorical, Metric
from schemas.validation import Rejected
from workers.precompute.ingest import heartbeat_structs
from workers.precompute.ingest.trace import trace_id

# (msg, reason, detail) for the dead-letter topic
Reject = Callable[[KafkaMessage, Reason, str], None]

_VALUE, _KEY, _PARTITION = methodcaller("value"), methodcaller("key"), methodcaller("partition")
# Many numbers as text, checked in one regex pass: joined by newlines, which none may contain.
_NUMBERS_TEXT = re.compile(rf"(?:(?:{NUMBER_TEXT.pattern})\n)*(?:{NUMBER_TEXT.pattern})")

__all__ = ["Decoder", "Heartbeats", "Reject", "trace_id"]


@dataclass
class Heartbeats:
    """Accepted heartbeats of one batch, in consumption order (the slow path's at the end);
    `cols` holds the spec's state columns (`FeatureModel.state`)."""

    msgs: list[KafkaMessage] = field(default_factory=list)
    device_ids: list[str] = field(default_factory=list)
    event_ids: list[str | None] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    event_time_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cols: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def __len__(self) -> int:
        return len(self.device_ids)


class Decoder:
    """The decoders of one compiled fleet."""

    def __init__(self, fleet: Fleet, on_unknown: Callable[[str, int], None] | None = None) -> None:
        self.fleet = fleet
        # (field, count) of categorical values outside the vocabulary: the worker counts them in
        # its metrics; the drift monitor and the shadow run (which share this decoder but not
        # the worker's metrics) leave it unset
        self.on_unknown = on_unknown
        self.validator = fleet.validator
        self.wire = heartbeat_structs.HeartbeatWire(fleet.spec, fleet.features)
        self.state: tuple[StateColumn, ...] = fleet.features.state
        hb = fleet.spec.heartbeats
        self._metrics = {n: f for n, f in hb.fields.items() if isinstance(f, Metric)}
        self._codes = {n: f for n, f in hb.fields.items() if isinstance(f, Categorical)}
        self._index = {n: {v: i for i, v in enumerate(f.values)} for n, f in self._codes.items()}
        self._members: dict[str, frozenset[Any]] = {}
        for c in self.state:
            if c.kind == "member":
                vals = c.values
                self._members[c.name] = (
                    frozenset((b, s) for b, ss in vals.items() for s in ss)
                    if isinstance(vals, dict)
                    else frozenset(vals)
                )
        leaves = self.wire.typed
        self._numeric = [x.name for x in leaves if x.numeric]
        self._ints = [x.name for x in leaves if x.role == "int"]
        self._ids = [x.name for x in leaves if x.role == "id"]
        self._seconds = [x.name for x in leaves if x.role == "time_s"]
        self._has_produced = any(x.name == "produced_at_ms" for x in leaves)
        self._has_event_id = any(x.name == "event_id" for x in leaves)
        self._skew = round(fleet.spec.time.max_skew_s * 1000)
        # the numeric state columns as one block: where they are all present, finite and in
        # range (every record of a healthy fleet), one array step checks them all
        num = [(j, c.name) for j, c in enumerate(self.state) if c.kind == "numeric"]
        self._num_pos, self._num_names = [j for j, _ in num], [name for _, name in num]
        bounds = [self._metrics.get(name) for name in self._num_names]
        self._num_lo = np.array([-np.inf if f is None or f.min is None else f.min for f in bounds])
        self._num_hi = np.array([np.inf if f is None or f.max is None else f.max for f in bounds])
        # device -> raw metadata objects last found valid: a device's metadata rarely changes,
        # so after its first heartbeat the check is one comparison of raw bytes. Bounded.
        self._raw_good: dict[str, tuple[msgspec.Raw, ...]] = {}

    # -- the slow path: the full contract --------------------------------------------------------
    def validate(self, role: str, msg: KafkaMessage) -> dict[str, Any] | Rejected:
        """The event as a normalized dict, or why it is rejected, by the one contract validator
        every consumer uses (`schemas.validation`)."""
        result = self.validator.validate(role, msg.key(), msg.value(), msg.headers())
        if result.ok:
            event: dict[str, Any] = result.event
            return event
        return result

    # -- heartbeats: the fast path ------------------------------------------------------------------
    def _parse(
        self, msgs: Sequence[KafkaMessage], slow: list[KafkaMessage]
    ) -> tuple[list[KafkaMessage], list[Any], list[int]]:
        values = list(map(_VALUE, msgs))
        try:
            oversized = max(map(len, values)) > MAX_EVENT_BYTES
        except (TypeError, ValueError):  # a null value (tombstone), or no records
            oversized = bool(values)
        strict, variant = self.wire.canonical, self.wire.decode_variant
        ok_msgs, rows, odd = [], [], []
        for m, v in zip(msgs, values, strict=True):
            try:
                if oversized and (v is None or len(v) > MAX_EVENT_BYTES):
                    raise TypeError
                rows.append(strict(v))
                ok_msgs.append(m)
            except Exception as exc:  # noqa: BLE001 - msgspec raises RecursionError too
                # (a deeply nested ignored field); whatever the structs refuse, the variants
                # or else the validator (which never raises) judge
                try:
                    row = variant(v, exc) if v is not None and len(v) <= MAX_EVENT_BYTES else None
                except Exception:  # noqa: BLE001
                    row = None
                if row is None:
                    slow.append(m)
                else:
                    odd.append(len(rows))
                    rows.append(row)
                    ok_msgs.append(m)
        return ok_msgs, rows, odd

    def _text_numbers(self, cols: dict[str, list[Any]], odd: list[int], bad: set[int]) -> None:
        """Numbers sent as text (only the variant rows can hold any) must be in the contract's
        grammar; valid text stays as it is (numpy parses it like float() below)."""
        texts = [v for name in self._numeric for i in odd if type(v := cols[name][i]) is str]
        joined = "\n".join(texts)
        if not texts or (joined.count("\n") == len(texts) - 1 and _NUMBERS_TEXT.fullmatch(joined)):
            ints = [v for name in self._ints for i in odd if type(v := cols[name][i]) is str]
            if all(INT_TEXT.fullmatch(v) for v in ints):
                return
        for i in odd:
            for name in self._numeric:
                v = cols[name][i]
                grammar = INT_TEXT if name in self._ints else NUMBER_TEXT
                if type(v) is str and not grammar.fullmatch(v):
                    bad.add(i)
                    cols[name][i] = 0.0  # the row leaves the fast path; keep the column numeric

    def _check_rows(self, msgs: list[KafkaMessage], cols: dict[str, list[Any]]) -> set[int]:
        """Column-wise checks the typed decoders cannot express; returns the failing rows."""
        bad: set[int] = set()
        did = cols["device_id"]
        keys = list(map(_KEY, msgs))
        encoded = list(map(str.encode, did))
        if keys != encoded:
            bad.update(i for i, (k, d) in enumerate(zip(keys, encoded, strict=True)) if k != d)
        for name in ("event_id", *self._ids):
            col = cols.get(name)
            if col is not None and not heartbeat_structs.event_ids_ok(
                [x for x in col if x is not None]
            ):
                bad.update(
                    i
                    for i, e in enumerate(col)
                    if e is not None and not heartbeat_structs.event_ids_ok((e,))
                )
        bad.update(heartbeat_structs.device_ids_bad(did))
        if self.wire.raw_keys:
            bad.update(self._bad_raw(did, cols))
        return bad

    def _bad_raw(self, devices: list[str], cols: dict[str, list[Any]]) -> list[int]:
        keys = self.wire.raw_keys
        rows = list(zip(*(cols[f"raw:{k}"] for k in keys), strict=True))  # a tuple per record
        seen = list(map(self._raw_good.get, devices))
        if seen == rows:
            return []  # every device sent what it sent before: tuples of Raw compared in C
        if len(self._raw_good) >= heartbeat_structs._CACHE_MAX:
            self._raw_good.clear()
        ok, good, bad = self.wire.raw_ok, self._raw_good, []
        for i, (d, mine, known) in enumerate(zip(devices, rows, seen, strict=True)):
            if mine == known:
                continue
            if ok(dict(zip(keys, mine, strict=True))):
                good[d] = tuple(r.copy() for r in mine)  # not the whole record
            else:
                bad.append(i)
        return bad

    def heartbeats(self, msgs: Sequence[KafkaMessage], reject: Reject) -> Heartbeats:
        """State columns for `FeatureModel.build` from heartbeat records; rejections go to
        `reject`."""
        out = Heartbeats(cols=np.zeros((0, len(self.state))))
        slow: list[KafkaMessage] = []
        ok_msgs, rows, odd = self._parse(msgs, slow)
        if rows:
            cols = self.wire.columns(rows)
            bad = self._check_rows(ok_msgs, cols)
            if odd:
                self._text_numbers(cols, odd, bad)
            values, times, ok = self._state(cols, len(rows), bad)
            did = cols["device_id"]
            eid = cols["event_id"] if self._has_event_id else [None] * len(rows)
            if ok.all():
                out.msgs, out.device_ids, out.event_ids = ok_msgs, list(did), list(eid)
            else:
                keep = np.flatnonzero(ok).tolist()
                slow.extend(ok_msgs[i] for i in np.flatnonzero(~ok).tolist())
                out.msgs = [ok_msgs[i] for i in keep]
                out.device_ids, out.event_ids = [did[i] for i in keep], [eid[i] for i in keep]
                values, times = values[keep], times[keep]
            out.cols, out.event_time_ms = values, times
            out.partitions = list(map(_PARTITION, out.msgs))
        if slow:
            self._slow_heartbeats(out, slow, reject)
        return out

    def _state(
        self, cols: dict[str, list[Any]], n: int, bad: set[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(state columns, event times, ok) of the typed rows, column by column."""
        ok = np.ones(n, dtype=bool)
        if bad:
            ok[list(bad)] = False
        times = self._times(cols, n, ok)
        values = np.empty((n, len(self.state)), dtype=np.float64)
        clean = self._numeric_block(cols, values)
        for j, c in enumerate(self.state):
            if c.kind == "numeric":
                if not clean:
                    values[:, j] = self._numeric_column(c.name, cols[c.name], ok)
            elif c.kind == "code":
                get = self._index[c.name].get
                col = cols[c.name]
                codes = [get(x, -1) for x in col]
                values[:, j] = codes
                unknown = [i for i, k in enumerate(codes) if k < 0 and col[i] is not None]
                if unknown:
                    if self._codes[c.name].unknown == "reject":
                        ok[unknown] = False
                    elif self.on_unknown is not None:
                        self.on_unknown(c.name, len(unknown))
                if None in col:
                    values[[i for i, x in enumerate(col) if x is None], j] = c.fill
            else:
                values[:, j] = self._member_column(c, cols)
        return values, times, ok

    def _times(self, cols: dict[str, list[Any]], n: int, ok: np.ndarray) -> np.ndarray:
        t = np.asarray(cols["event_time_ms"], dtype=np.float64 if self._seconds else np.int64)
        if "event_time_ms" in self._seconds:
            t = np.rint(t * 1000.0)
        if self._has_produced:
            p = np.asarray(cols["produced_at_ms"], dtype=np.float64 if self._seconds else np.int64)
            if "produced_at_ms" in self._seconds:
                p = np.rint(p * 1000.0)
            ok &= t <= p + self._skew
            if self._seconds:
                ok &= (p >= ev.MIN_TIME_MS) & (p <= ev.MAX_TIME_MS)
        if self._seconds:
            ok &= (t >= ev.MIN_TIME_MS) & (t <= ev.MAX_TIME_MS)
            t = np.where(ok, t, 0)
        return np.asarray(t, dtype=np.int64)

    def _numeric_block(self, cols: dict[str, list[Any]], values: np.ndarray) -> bool:
        """All numeric columns at once into `values`; False (nothing decided) unless every
        value is present, finite and within its bounds: then `_numeric_column`, column by
        column, applies the rules for the others."""
        names = self._num_names
        if not names or any(None in cols[name] for name in names):
            return False
        v = np.array([cols[name] for name in names], dtype=np.float64).T  # parses number text
        if not (np.isfinite(v).all() and (v >= self._num_lo).all() and (v <= self._num_hi).all()):
            return False
        values[:, self._num_pos] = v
        return True

    def _numeric_column(self, name: str, col: list[Any], ok: np.ndarray) -> np.ndarray:
        v = np.array(col, dtype=np.float64)  # (parses number text, see _text_numbers; None: NaN)
        absent = np.array([x is None for x in col]) if None in col else None
        finite = np.isfinite(v)
        if absent is not None:
            ok &= finite | absent
        elif not finite.all():
            ok &= finite
        f = self._metrics.get(name)
        if f is None or (f.min is None and f.max is None):
            return v
        lo = -np.inf if f.min is None else f.min
        hi = np.inf if f.max is None else f.max
        inside = (v >= lo) & (v <= hi)
        if absent is not None:
            inside |= absent
        if inside.all():
            return v
        if f.out_of_range == "reject":
            ok &= inside
        elif f.out_of_range == "clip":
            v = np.where(inside | ~finite, v, np.clip(v, lo, hi))
        else:  # null: the feature's missing rule applies
            v = np.where(inside, v, np.nan)
        return v

    def _member_column(self, c: StateColumn, cols: dict[str, list[Any]]) -> list[Any]:
        members = self._members[c.name]
        src = cols[c.source]
        flags: list[Any]
        if c.by is None:
            flags = list(map(members.__contains__, src))
        else:
            flags = list(map(members.__contains__, zip(cols[c.by], src, strict=True)))
        if None in src:
            return [c.fill if s is None else float(f) for s, f in zip(src, flags, strict=True)]
        return flags

    def _slow_heartbeats(self, out: Heartbeats, slow: list[KafkaMessage], reject: Reject) -> None:
        rows, times = [], []
        state_row = self.fleet.features.state_row
        for m in slow:
            e = self.validate("heartbeats", m)
            if isinstance(e, Rejected):
                reject(m, e.reason, e.detail)
                continue
            out.msgs.append(m)
            out.device_ids.append(e["device_id"])
            out.event_ids.append(e["event_id"])
            out.partitions.append(m.partition())
            rows.append(state_row(e))
            times.append(e["event_time_ms"])
        if rows:
            out.cols = np.vstack([out.cols, np.array(rows, dtype=np.float64)])
            out.event_time_ms = np.concatenate([out.event_time_ms, np.array(times, dtype=np.int64)])

    # -- low-rate topics ------------------------------------------------------------------------------
    def events(
        self, role: str, msgs: Sequence[KafkaMessage], reject: Reject
    ) -> list[tuple[KafkaMessage, dict[str, Any]]]:
        out = []
        for m in msgs:
            e = self.validate(role, m)
            if isinstance(e, Rejected):
                reject(m, e.reason, e.detail)
            else:
                out.append((m, e))
        return out
