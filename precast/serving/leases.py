"""Validity leases in the serving stores (contract: schemas.leases): the newest lease per
partition (`LeaseBook`) and the extended copy of an entry a read gets (`extend`).

A lease never changes which answer is stored (newest-wins decides that, lease or not); it only
lengthens the validity of the stored answer when that answer's terms allow it. Stores apply
the records of one partition in topic order and a lease only after the answers before it, so
the book is never ahead of the entries: a device that stopped sending has its lease-free last
record stored before the lease that no longer covers it arrives. A book *behind* the entries is
harmless: an older lease never extends a newer answer past its own validity (its end is at
most the newer answer's data time + horizon), and a lease of an older generation never extends
an answer of a newer one.

The extended copy is built once per (entry, lease) and cached per device, so a read of a quiet
device served under a lease costs a dict lookup and two identity checks more than one that is
not; the copy's body carries the extended `valid_until_ms` and an `extended_by` object naming
the lease record (partition, offset: its audit proof)."""

from __future__ import annotations

import re
import threading
from typing import Annotated

import msgspec

from precast.serving.entry import Entry, Extension, InvalidPrediction
from precast.serving.result import EXPIRED, OLDER, STORED
from schemas.deadletters import Reason
from schemas.leases import LEASE_KEY_PREFIX, LeaseOrder, lease_order

_MAX_MS = 10**13 - 1
_Ms = Annotated[int, msgspec.Meta(ge=0, le=_MAX_MS)]
_Int = Annotated[int, msgspec.Meta(ge=0, le=_MAX_MS)]


class Lease(msgspec.Struct, frozen=True, gc=False):
    """One partition's newest validity lease as a store keeps it."""

    partition: int
    generation: int
    certified_at_ms: int
    valid_until_ms: int
    produced_at_ms: int
    received_at_ms: int  # when a materializer took it from Kafka
    offset: int  # its record's offset in the predictions partition (-1: unknown)

    @property
    def order(self) -> LeaseOrder:
        return lease_order(self.generation, self.certified_at_ms, self.produced_at_ms)


class _Record(msgspec.Struct, gc=False):
    kind: str
    partition: _Int
    generation: _Int
    certified_at_ms: _Ms
    valid_until_ms: _Ms
    produced_at_ms: _Ms


_DECODE = msgspec.json.Decoder(_Record).decode


def lease_from_record(
    value: bytes, key: bytes | None, received_at_ms: int, offset: int = -1
) -> Lease:
    """A `Lease` from one `#lease:<partition>` record; `InvalidPrediction` with a dead-letter
    reason when it is not one (the key must name the partition the value does)."""
    try:
        r = _DECODE(value)
    except msgspec.ValidationError as exc:
        raise InvalidPrediction(Reason.INVALID, f"validity lease: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidPrediction(Reason.NOT_JSON, str(exc)) from None
    if r.kind != "validity_lease":
        raise InvalidPrediction(Reason.INVALID, f"validity lease: kind {r.kind[:32]!r}")
    if key is not None and key != LEASE_KEY_PREFIX + b"%d" % r.partition:
        raise InvalidPrediction(
            Reason.KEY_MISMATCH, f"key {key[:64]!r} != lease of partition {r.partition}"
        )
    if r.valid_until_ms < r.certified_at_ms:
        raise InvalidPrediction(Reason.INVALID, "validity lease ends before its certification")
    return Lease(
        r.partition,
        r.generation,
        r.certified_at_ms,
        r.valid_until_ms,
        r.produced_at_ms,
        received_at_ms,
        offset,
    )


_VALID_UNTIL = re.compile(rb'"valid_until_ms":\s*(\d+)')


def extend(e: Entry, lease: Lease, until_ms: int) -> Entry:
    """The copy of `e` a read gets under `lease`: valid until `until_ms`, its body saying so
    (the extended `valid_until_ms`, and `extended_by` naming the lease). Identity (order key,
    ETag) stays the answer's: the answer did not change, its validity did."""
    body = e.body
    m = _VALID_UNTIL.search(body)
    if m is not None:
        body = body[: m.start(1)] + b"%d" % until_ms + body[m.end(1) :]
    body = body[:-1] + (
        b',"extended_by":{"partition":%d,"offset":%d,"generation":%d,"certified_at_ms":%d}}'
        % (lease.partition, lease.offset, lease.generation, lease.certified_at_ms)
    )
    ext = Extension(
        lease.partition,
        lease.offset,
        lease.generation,
        lease.certified_at_ms,
        lease.produced_at_ms,
        lease.received_at_ms,
        e.valid_until_ms,
    )
    return Entry(
        e.computed_at_ms,
        e.produced_at_ms,
        e.model_version,
        until_ms,
        e.received_at_ms,
        e.inference_ms,
        e.purge,
        body,
        e.backfill,
        e.terms,
        ext,
        e.trace,
    )


def extension_until(e: Entry, lease: Lease | None) -> int:
    """The extension rule of schemas.leases: an answer with terms, on the lease's partition, of a
    generation not newer than the lease's, is valid until the lease's end, never past its terms'
    `until_ms`, never less than its own validity."""
    t, own = e.terms, e.valid_until_ms
    if t is None or lease is None or t.generation > lease.generation:
        return own
    if t.partition != lease.partition:
        return own
    until = e.computed_at_ms + t.extension_ms
    end = lease.valid_until_ms if lease.valid_until_ms < until else until
    return end if end > own else own


class LeaseBook:
    """The newest lease per partition, and the extended copies reads got. Writers (the
    materializer) take the lock; reads take none (dict lookups are atomic under the GIL)."""

    def __init__(self, grace_ms: int = 0) -> None:
        self.grace_ms = grace_ms
        self._by_part: dict[int, Lease] = {}
        self._lock = threading.Lock()
        # partition -> device -> (stored entry, lease, extended copy), valid while both are
        # still current; a partition's copies go with its lease, so what is kept is bounded by
        # the devices read during one lease interval
        self._copies: dict[int, dict[str, tuple[Entry, Lease, Entry]]] = {}
        self.get = self._by_part.get

    def __len__(self) -> int:
        return len(self._by_part)

    def leases(self) -> list[Lease]:
        return list(self._by_part.values())

    def put_many(self, leases: list[Lease], now_ms: int) -> list[int]:
        """STORED when strictly newer than the partition's lease, OLDER otherwise (duplicates
        and late ones change nothing), EXPIRED when already past its end plus the grace."""
        out = []
        with self._lock:
            for x in leases:
                if x.valid_until_ms + self.grace_ms <= now_ms:
                    out.append(EXPIRED)
                    continue
                cur = self._by_part.get(x.partition)
                if cur is not None and x.order <= cur.order:
                    out.append(OLDER)
                    continue
                self._by_part[x.partition] = x
                self._copies.pop(x.partition, None)
                out.append(STORED)
        return out

    def clear(self) -> None:
        with self._lock:
            self._by_part.clear()
            self._copies.clear()

    def resolve(self, device_id: str, e: Entry) -> Entry:
        """`e` as a read serves it: the extended copy when its partition's lease extends it,
        else `e` itself."""
        t = e.terms
        if t is None:
            return e
        lease = self._by_part.get(t.partition)
        if lease is None:
            return e
        copies = self._copies.get(t.partition)
        if copies is None:
            copies = self._copies.setdefault(t.partition, {})
        cached = copies.get(device_id)
        if cached is not None and cached[0] is e and cached[1] is lease:
            return cached[2]
        until = extension_until(e, lease)
        if until <= e.valid_until_ms:
            return e
        x = extend(e, lease, until)
        copies[device_id] = (e, lease, x)
        return x
