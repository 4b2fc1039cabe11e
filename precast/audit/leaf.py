"""The canonical leaf of one predictions record: what the log commits to for each offset.

A leaf is compact JSON with its keys in sorted order (msgspec writes a Struct's fields in the
order declared, and they are declared sorted), so the same record always gives the same bytes
on every machine. It names the record's place (topic, partition, offset), the prediction's
device, model version, computed_at and produced_at, its trigger (a purge marker is a
`trigger="purge"` prediction with no candidates), a hash of the candidates in canonical form
and a hash of the record's exact value bytes (so lineage, valid_until and every other field are
committed too). A validity lease (`#lease:<partition>`, schemas.leases) is a leaf of kind
`lease`: its key as the device, its certification time as computed_at, its production time, and
the value hash committing to its generation and end, so every extension of an answer's validity
is provable like the answer. A tombstone or an unreadable value still gets a leaf (`kind`), so
the leaves follow the topic's offsets with no gap.

Whatever else a value holds (nesting past any recursion limit, numbers out of range, wrong
types anywhere) makes it an `invalid` leaf too, the same one on every machine and at any stack
depth: the nesting is bounded here (`MAX_DEPTH`) rather than by the interpreter's recursion
limit, which depends on how deep the caller's stack already is, and integers a leaf stores are
bounded to what SQLite holds. `on_invalid` hears why, so that readers can count it."""

from __future__ import annotations

import re
from collections.abc import Callable
from hashlib import sha256
from typing import Annotated

import msgspec

from schemas.leases import is_lease_key

LEAF_VERSION = 1
# Deeper values are `invalid` leaves: far below any recursion limit, far above what a worker
# writes (a prediction nests 3-4 levels).
MAX_DEPTH = 128
# What the store keeps in an INTEGER column (SQLite: signed 64 bits).
_Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')

OnInvalid = Callable[[BaseException], object]


class TooDeep(ValueError):
    pass


def _check_depth(value: bytes) -> None:
    """`TooDeep` past MAX_DEPTH; counts brackets first, so a usual value costs two scans."""
    if value.count(b"[") + value.count(b"{") <= MAX_DEPTH:
        return
    depth = 0
    for m in _TOKENS.finditer(value):
        t = m.group()
        if t == b"[" or t == b"{":
            depth += 1
            if depth > MAX_DEPTH:
                raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
        elif t == b"]" or t == b"}":
            depth -= 1


class _Candidate(msgspec.Struct):
    strategy: str
    score: float


class _Prediction(msgspec.Struct):
    # Only the fields the leaf names; the rest is covered by the value hash.
    device_id: str
    model_version: str
    computed_at_ms: _Int
    produced_at_ms: _Int
    trigger: str
    candidates: list[_Candidate]


class _Lease(msgspec.Struct):
    kind: str
    partition: _Int
    generation: _Int
    certified_at_ms: _Int
    valid_until_ms: _Int
    produced_at_ms: _Int


class Leaf(msgspec.Struct, frozen=True, omit_defaults=False):
    # Declared in sorted key order: the encoding is canonical (see the module docstring).
    candidates_sha256: str | None
    computed_at_ms: int | None
    device: str | None
    kind: str  # "prediction" | "lease" | "tombstone" | "invalid"
    model_version: str | None
    offset: int
    partition: int
    produced_at_ms: int | None
    topic: str
    trigger: str | None
    v: int
    value_sha256: str | None


_decode_prediction = msgspec.json.Decoder(_Prediction).decode
_decode_lease = msgspec.json.Decoder(_Lease).decode
_encode = msgspec.json.Encoder().encode
_decode_leaf = msgspec.json.Decoder(Leaf).decode
_DecodeError = msgspec.DecodeError


def candidates_digest(candidates: list[_Candidate]) -> str:
    """SHA-256 of the candidates as `[["strategy",score],...]` (shortest round-trip floats)."""
    return sha256(_encode([(c.strategy, c.score) for c in candidates])).hexdigest()


def leaf_of(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    on_invalid: OnInvalid | None = None,
) -> Leaf:
    if value is None:
        device = key.decode("utf-8", "replace") if key else None
        return Leaf(
            None,
            None,
            device,
            "tombstone",
            None,
            offset,
            partition,
            None,
            topic,
            None,
            LEAF_VERSION,
            None,
        )
    value_digest = sha256(value).hexdigest()
    try:
        _check_depth(value)
        if is_lease_key(key):
            lease = _lease_leaf(topic, partition, offset, key, value, value_digest)
            if lease is not None:
                return lease
        p = _decode_prediction(value)
    except Exception as exc:  # noqa: BLE001 - whatever a value holds: an invalid leaf
        if on_invalid is not None:
            on_invalid(exc)
        device = key.decode("utf-8", "replace") if key else None
        return Leaf(
            None,
            None,
            device,
            "invalid",
            None,
            offset,
            partition,
            None,
            topic,
            None,
            LEAF_VERSION,
            value_digest,
        )
    return Leaf(
        candidates_digest(p.candidates),
        p.computed_at_ms,
        p.device_id,
        "prediction",
        p.model_version,
        offset,
        partition,
        p.produced_at_ms,
        topic,
        p.trigger,
        LEAF_VERSION,
        value_digest,
    )


def _lease_leaf(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes, digest: str
) -> Leaf | None:
    try:
        x = _decode_lease(value)
    except Exception:  # noqa: BLE001 - then it is read as a prediction (or an invalid leaf)
        return None
    if x.kind != "validity_lease":
        return None
    return Leaf(
        None,
        x.certified_at_ms,
        key.decode("utf-8", "replace") if key else None,
        "lease",
        None,
        offset,
        partition,
        x.produced_at_ms,
        topic,
        None,
        LEAF_VERSION,
        digest,
    )


def encode_leaf(leaf: Leaf) -> bytes:
    return _encode(leaf)


def leaf_data(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
) -> bytes:
    """The leaf bytes of one record (what is hashed with the 0x00 prefix)."""
    return _encode(leaf_of(topic, partition, offset, key, value))


def decode_leaf(data: bytes) -> Leaf:
    """`ValueError` when `data` is not a leaf (an altered one, say)."""
    try:
        return _decode_leaf(data)
    except (_DecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a leaf: {exc}") from None
