"""Checkpoints and proofs as JSON documents, and their checking by someone who trusts only the
log's public key: the same shapes over the auditor's HTTP API and in `precast audit prove`.

An inclusion document carries the leaf bytes, the proof and the signed checkpoint it proves
against; a consistency document carries both signed checkpoints. Checking needs nothing from
the log itself."""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from precast.audit.checkpoint import Checkpoint, Verifier, open_note
from precast.audit.hashing import leaf_hash
from precast.audit.leaf import decode_leaf
from precast.audit.proofs import ProofError, Prover, verify_consistency, verify_inclusion
from precast.audit.store import LogStore, StoredCheckpoint


class NotFound(LookupError):
    """No such leaf or checkpoint (yet)."""


def checkpoint_doc(sc: StoredCheckpoint) -> dict[str, Any]:
    return {"size": sc.size, "root": sc.root.hex(), "published_at_ms": sc.at_ms, "note": sc.note}


def _checkpoint(store: LogStore, size: int | None) -> StoredCheckpoint:
    sc = store.latest_checkpoint() if size is None else store.checkpoint(size)
    if sc is None:
        raise NotFound(
            "no signed checkpoint yet" if size is None else f"no checkpoint of size {size}"
        )
    return sc


def find_leaf(
    store: LogStore,
    *,
    partition: int | None = None,
    offset: int | None = None,
    device: str | None = None,
    computed_at_ms: int | None = None,
) -> int:
    """The leaf of a record (by partition and offset), or of a device's prediction (by device
    and computed_at: the first such leaf)."""
    if partition is not None and offset is not None:
        idx = store.find_by_offset(partition, offset)
        if idx is None:
            raise NotFound(f"no leaf for partition {partition} offset {offset}")
        return idx
    if device is not None and computed_at_ms is not None:
        found = store.find_by_device(device, computed_at_ms)
        if not found:
            raise NotFound(f"no leaf for device {device!r} computed_at {computed_at_ms}")
        return found[0]
    raise ValueError("give partition and offset, or device and computed_at")


def inclusion_doc(store: LogStore, idx: int, tree_size: int | None = None) -> dict[str, Any]:
    sc = _checkpoint(store, tree_size)
    if idx >= sc.size:
        raise NotFound(f"leaf {idx} is not covered by a signed checkpoint yet (size {sc.size})")
    row = store.leaf(idx)
    if row is None:
        raise NotFound(f"leaf {idx} is missing from the store")
    stored_hash, data = row
    return {
        "leaf_index": idx,
        "leaf": msgspec.to_builtins(decode_leaf(data)),
        "leaf_data": base64.b64encode(data).decode(),
        "leaf_hash": stored_hash.hex(),
        "tree_size": sc.size,
        "proof": [h.hex() for h in Prover(store).inclusion(idx, sc.size)],
        "checkpoint": checkpoint_doc(sc),
    }


def consistency_doc(store: LogStore, first: int, second: int | None = None) -> dict[str, Any]:
    old = _checkpoint(store, first)
    new = _checkpoint(store, second)
    if old.size > new.size:
        raise ValueError(f"first size {old.size} is larger than second size {new.size}")
    return {
        "first": checkpoint_doc(old),
        "second": checkpoint_doc(new),
        "proof": [h.hex() for h in Prover(store).consistency(old.size, new.size)],
    }


def check_inclusion(doc: dict[str, Any], verifier: Verifier) -> Checkpoint:
    """Verify an inclusion document with the public key only; `ProofError` or
    `CheckpointError` when anything does not hold."""
    cp = open_note(doc["checkpoint"]["note"], verifier)
    data = base64.b64decode(doc["leaf_data"])
    if msgspec.to_builtins(decode_leaf(data)) != doc["leaf"]:
        raise ProofError("the leaf fields do not match the leaf bytes")
    verify_inclusion(
        int(doc["leaf_index"]),
        cp.size,
        leaf_hash(data),
        [bytes.fromhex(h) for h in doc["proof"]],
        cp.root,
    )
    return cp


def check_consistency(doc: dict[str, Any], verifier: Verifier) -> tuple[Checkpoint, Checkpoint]:
    old = open_note(doc["first"]["note"], verifier)
    new = open_note(doc["second"]["note"], verifier)
    verify_consistency(
        old.size, new.size, old.root, new.root, [bytes.fromhex(h) for h in doc["proof"]]
    )
    return old, new
