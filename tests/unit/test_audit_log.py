"""The durable log and its verification: a log built through the auditor's own append step
verifies, and each kind of tampering (a flipped byte, a deleted leaf, two swapped leaves, a
truncation, an altered or re-signed checkpoint) is detected and names the first bad leaf."""

from __future__ import annotations

import sqlite3
from hashlib import sha256
from pathlib import Path

import orjson
import pytest

from precast.audit.answers import (
    check_consistency,
    check_inclusion,
    consistency_doc,
    find_leaf,
    inclusion_doc,
)
from precast.audit.batch import append_records
from precast.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    Signer,
    Verifier,
    load_or_create_signer,
    open_note,
    public_path,
)
from precast.audit.hashing import leaf_hash, root_of
from precast.audit.leaf import decode_leaf, leaf_data
from precast.audit.proofs import ProofError
from precast.audit.store import LogStore, StoreError
from precast.audit.verify import verify_store
from precast.kafka.types import Record

TOPIC = "t.predictions"
ORIGIN = "test.local/audit"


def value(device: str, computed: int, purge: bool = False) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [] if purge else [{"strategy": "replace_part", "score": 0.6}],
            "model_version": "1.0.0",
            "computed_at_ms": computed,
            "valid_until_ms": computed + 600_000,
            "produced_at_ms": computed + 5,
            "trigger": "purge" if purge else "heartbeat",
            "lineage": [{"topic": "t.heartbeats", "partition": 0, "offset": computed}],
        }
    )


def records(n: int, partitions: int = 2) -> list[Record]:
    """n records spread over partitions, offsets rising per partition (as the topic gives)."""
    out, next_off = [], [0] * partitions
    for i in range(n):
        p = i % partitions
        dev = f"dev-{i % 7:03d}"
        out.append(Record(TOPIC, p, next_off[p], dev.encode(), value(dev, 1_000 + i)))
        next_off[p] += 1
    out.append(Record(TOPIC, 0, next_off[0], b"dev-000", None))  # a tombstone
    out.append(Record(TOPIC, 1, next_off[1], b"dev-001", b"not json"))  # unreadable
    out.append(Record(TOPIC, 0, next_off[0] + 1, b"dev-002", value("dev-002", 9_999, purge=True)))
    return out


@pytest.fixture
def signer() -> Signer:
    return Signer.generate(ORIGIN)


def build(tmp_path: Path, signer: Signer, recs: list[Record], every: int = 10) -> LogStore:
    """A log appended in batches of `every`, a signed checkpoint after each batch."""
    store = LogStore(tmp_path / "log.db")
    store.bind(ORIGIN, TOPIC)
    for i in range(0, len(recs), every):
        batch = append_records(store, TOPIC, recs[i : i + every])
        cp = Checkpoint(ORIGIN, batch.tree.size, batch.tree.root())
        store.add_checkpoint(cp.size, cp.root, signer.sign(cp), 0)
    return store


def topic_of(recs: list[Record]):
    def read(ranges):
        for r in sorted(recs, key=lambda r: (r.partition(), r.offset())):
            if r.partition() in ranges:
                yield r.partition(), r.offset(), r.key(), r.value()

    return read


def test_a_faithful_log_verifies_and_proves(tmp_path, signer):
    recs = records(95)
    store = build(tmp_path, signer, recs)
    hashes = [
        leaf_hash(leaf_data(TOPIC, r.partition(), r.offset(), r.key(), r.value())) for r in recs
    ]
    assert store.latest_checkpoint().root == root_of(hashes)
    report = verify_store(store, signer.verifier, topic_records=topic_of(recs))
    assert report.ok, report.findings
    assert report.leaves == len(recs) and report.topic_checked == len(recs)
    assert report.checkpoints_checked == len(store.checkpoints())
    kinds = [decode_leaf(store.leaf(i)[1]).kind for i in range(len(recs))]
    assert kinds[-3:] == ["tombstone", "invalid", "prediction"]
    assert decode_leaf(store.leaf(len(recs) - 1)[1]).trigger == "purge"

    idx = find_leaf(store, device="dev-003", computed_at_ms=1_003)
    doc = inclusion_doc(store, idx)
    assert check_inclusion(doc, signer.verifier).size == len(recs)
    assert doc["leaf"]["device"] == "dev-003" and doc["leaf"]["computed_at_ms"] == 1_003
    assert find_leaf(store, partition=1, offset=0) == 1
    forged = {**doc, "leaf_index": doc["leaf_index"] + 1}
    with pytest.raises(ProofError):
        check_inclusion(forged, signer.verifier)

    cons = consistency_doc(store, 20, None)
    old, new = check_consistency(cons, signer.verifier)
    assert (old.size, new.size) == (20, len(recs))
    cons["proof"][0] = "00" * 32
    with pytest.raises(ProofError):
        check_consistency(cons, signer.verifier)


def tamper(store: LogStore, sql: str, *args: object) -> LogStore:
    db = sqlite3.connect(store.path)
    db.execute(sql, args)
    db.commit()
    db.close()
    return LogStore(store.path, readonly=True)


def first(store: LogStore, verifier: Verifier, recs: list[Record] | None = None):
    report = verify_store(store, verifier, topic_records=topic_of(recs) if recs else None)
    assert not report.ok
    return report.first()


def test_a_flipped_byte_is_named(tmp_path, signer):
    store = build(tmp_path, signer, records(60))
    data = bytearray(store.leaf(23)[1])
    data[40] ^= 0x01
    f = first(
        tamper(store, "UPDATE leaves SET data = ? WHERE idx = 23", bytes(data)), signer.verifier
    )
    assert f.leaf == 23 and "altered" in f.what


def test_a_rewritten_leaf_with_its_hash_is_named_by_the_topic(tmp_path, signer):
    recs = records(60)
    store = build(tmp_path, signer, recs)
    data = store.leaf(31)[1].replace(b'"computed_at_ms":1031', b'"computed_at_ms":1032')
    store = tamper(
        store, "UPDATE leaves SET data = ?, hash = ? WHERE idx = 31", data, leaf_hash(data)
    )
    without_topic = first(store, signer.verifier)
    # its computed_at no longer agrees with the column written beside it
    assert without_topic.leaf == 31 and "rewritten" in without_topic.what
    f = first(store, signer.verifier, recs)  # the topic names the leaf itself
    assert f.leaf == 31 and "differs from the topic record" in f.what


def test_a_deleted_leaf_is_named(tmp_path, signer):
    store = build(tmp_path, signer, records(60))
    f = first(tamper(store, "DELETE FROM leaves WHERE idx = 17"), signer.verifier)
    assert f.leaf == 17 and "missing" in f.what


def test_a_deleted_and_renumbered_leaf_is_named_by_the_topic(tmp_path, signer):
    recs = records(60)
    store = build(tmp_path, signer, recs)
    db = sqlite3.connect(store.path)
    db.execute("DELETE FROM leaves WHERE idx = 17")
    db.execute("UPDATE leaves SET idx = idx - 1 WHERE idx > 17")
    db.commit()
    db.close()
    report = verify_store(
        LogStore(store.path, readonly=True), signer.verifier, topic_records=topic_of(recs)
    )
    # Leaf 17 held partition 1 offset 8; the signed checkpoints bound it to [10, 20), and the
    # signed root over [0, 20) matches again with the topic's record put back at 17.
    assert any("partition 1 offset 8 has no leaf" in x.what for x in report.findings)
    f = report.first()
    assert f.leaf == 17 and f.upto is None and "missing" in f.what


def test_swapped_leaves_are_named(tmp_path, signer):
    store = build(tmp_path, signer, records(60))
    a, b = store.leaf(12), store.leaf(16)  # same partition (even indexes)
    db = sqlite3.connect(store.path)
    db.execute("UPDATE leaves SET hash = ?, data = ? WHERE idx = 12", (b[0], b[1]))
    db.execute("UPDATE leaves SET hash = ?, data = ? WHERE idx = 16", (a[0], a[1]))
    db.commit()
    db.close()
    f = first(LogStore(store.path, readonly=True), signer.verifier)
    assert f.leaf == 12 and "out of order" in f.what


def test_truncation_is_named(tmp_path, signer):
    recs = records(60)
    store = build(tmp_path, signer, recs)
    f = first(tamper(store, "DELETE FROM leaves WHERE idx >= 50"), signer.verifier)
    assert f.leaf == 50 and "truncated" in f.what


def test_an_altered_checkpoint_is_detected(tmp_path, signer):
    store = build(tmp_path, signer, records(60))
    latest = store.latest_checkpoint()
    other_root = sha256(b"another tree").digest()
    altered = latest.note.replace(
        Checkpoint(ORIGIN, latest.size, latest.root).body(),
        Checkpoint(ORIGIN, latest.size, other_root).body(),
    )
    store = tamper(store, "UPDATE checkpoints SET note = ? WHERE size = ?", altered, latest.size)
    report = verify_store(store, signer.verifier)
    assert any(
        f"checkpoint of size {latest.size}" in x.what and "signature" in x.what
        for x in report.findings
    )
    # Re-signed with another key: the log's key does not match either.
    intruder = Signer.generate(ORIGIN)
    forged = intruder.sign(Checkpoint(ORIGIN, latest.size, other_root))
    store = tamper(
        store,
        "UPDATE checkpoints SET note = ?, root = ? WHERE size = ?",
        forged,
        other_root,
        latest.size,
    )
    assert not verify_store(store, signer.verifier).ok


def test_signed_note_matches_go_reference():
    """golang.org/x/mod/sumdb/note's documented example (note.go, also its note_test.go):
    Ed25519 is deterministic, so the note must come out byte for byte."""
    skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
    vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    text = (
        "If you think cryptography is the answer to your problem,\n"
        "then you don't know what your problem is.\n"
    )
    signer = Signer.parse(skey)
    assert signer.verifier.encode() == vkey
    assert signer.sign_text(text) == (
        text
        + "\n\u2014 PeterNeumann "
        + "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
        + "\n"
    )


def test_checkpoint_format_and_keys(tmp_path):
    signer = load_or_create_signer(tmp_path / "k" / "signing.key", ORIGIN)
    assert (tmp_path / "k" / "signing.key").stat().st_mode & 0o777 == 0o600
    verifier = Verifier.parse(public_path(tmp_path / "k" / "signing.key").read_text())
    cp = Checkpoint(ORIGIN, 7, sha256(b"x").digest())
    note = signer.sign(cp)
    assert note.startswith(f"{ORIGIN}\n7\n") and "\n\n\u2014 " + ORIGIN + " " in note
    assert open_note(note, verifier) == cp
    assert (
        load_or_create_signer(tmp_path / "k" / "signing.key", ORIGIN).verifier.encode()
        == verifier.encode()
    )
    with pytest.raises(CheckpointError):
        load_or_create_signer(tmp_path / "k" / "signing.key", "other.origin")
    with pytest.raises(CheckpointError):
        open_note(note.replace("\n7\n", "\n8\n"), verifier)
    with pytest.raises(CheckpointError):
        open_note(note, Signer.generate(ORIGIN).verifier)
    with pytest.raises(CheckpointError):
        Checkpoint.parse("origin\n007\nAAAA\n")


def test_store_refuses_another_log(tmp_path, signer):
    store = build(tmp_path, signer, records(5))
    with pytest.raises(StoreError):
        store.bind("another.origin", TOPIC)
    with pytest.raises(StoreError):
        LogStore(tmp_path / "missing.db", readonly=True)


def test_cli_refuses_bad_input_in_one_line(tmp_path, signer, capsys):
    from opsctl.cli import main

    assert (
        main(
            [
                "audit",
                "verify",
                "--db",
                str(tmp_path / "none.db"),
                "--key",
                signer.verifier.encode(),
            ]
        )
        == 2
    )
    assert "no audit log at" in capsys.readouterr().err
    store = build(tmp_path, signer, records(30))
    assert main(["audit", "checkpoint", "--db", str(store.path), "--key", "not-a-key"]) == 2
    assert "verifier key" in capsys.readouterr().err
    other = Signer.generate(ORIGIN).verifier.encode()
    assert main(["audit", "checkpoint", "--db", str(store.path), "--key", other]) == 1
    assert "signature does not match" in capsys.readouterr().err
    assert main(["audit", "prove", "--db", str(store.path), "--key", other, "--offset", "1"]) == 2
    assert (
        main(
            [
                "audit",
                "prove",
                "--db",
                str(store.path),
                "--key",
                signer.verifier.encode(),
                "--partition",
                "0",
                "--offset",
                "1",
            ]
        )
        == 0
    )
    assert "included: leaf 2" in capsys.readouterr().out
    assert (
        main(
            [
                "audit",
                "verify",
                "--no-topic",
                "--db",
                str(store.path),
                "--key",
                signer.verifier.encode(),
            ]
        )
        == 0
    )
    assert "ok: every leaf" in capsys.readouterr().out


# -- a first checkpoint that covers a backlog (issue 36) ----------------------------------------
# The auditor started on a topic with a backlog signs its first checkpoint over all of it: the
# checkpoints alone bound a rewritten leaf to [0, backlog). Each kind of tampering, done so that
# every leaf stays self-consistent (its hash redone), is still named exactly.
BACKLOG = 700


@pytest.fixture
def backlog(tmp_path, signer):
    recs = records(BACKLOG)
    return build(tmp_path, signer, recs, every=BACKLOG), recs


def test_backlog_a_flipped_byte_is_named(backlog, signer):
    store, recs = backlog
    data = bytearray(store.leaf(300)[1])
    data[40] ^= 0x01  # inside a digest: still a well-formed leaf
    store = tamper(
        store,
        "UPDATE leaves SET data = ?, hash = ? WHERE idx = 300",
        bytes(data),
        leaf_hash(bytes(data)),
    )
    assert first(store, signer.verifier, recs).leaf == 300  # the topic holds its record
    # without the topic: bounded to the 256 leaves whose stored inner node no longer matches,
    # not to the whole backlog
    f = first(store, signer.verifier)
    assert (f.leaf, f.upto) == (256, 512)


def test_backlog_a_flipped_digit_is_named_without_the_topic(backlog, signer):
    store, _ = backlog
    data = store.leaf(300)[1].replace(b'"computed_at_ms":1300', b'"computed_at_ms":1301')
    store = tamper(
        store, "UPDATE leaves SET data = ?, hash = ? WHERE idx = 300", data, leaf_hash(data)
    )
    f = first(store, signer.verifier)
    assert f.leaf == 300 and f.upto is None and "rewritten" in f.what


def test_backlog_a_deleted_and_renumbered_leaf_is_named(backlog, signer):
    store, recs = backlog
    db = sqlite3.connect(store.path)
    db.execute("DELETE FROM leaves WHERE idx = 333")
    db.execute("UPDATE leaves SET idx = idx - 1 WHERE idx > 333")
    db.commit()
    db.close()
    f = first(LogStore(store.path, readonly=True), signer.verifier, recs)
    assert f.leaf == 333 and f.upto is None and "missing" in f.what, f


def test_backlog_swapped_leaves_of_two_partitions_are_named(backlog, signer):
    store, _ = backlog
    a, b = store.leaf(401), store.leaf(402)  # partitions 1 and 0: each stays in offset order
    db = sqlite3.connect(store.path)
    db.execute("UPDATE leaves SET hash = ?, data = ? WHERE idx = 401", (b[0], b[1]))
    db.execute("UPDATE leaves SET hash = ?, data = ? WHERE idx = 402", (a[0], a[1]))
    db.commit()
    db.close()
    f = first(LogStore(store.path, readonly=True), signer.verifier)
    assert f.leaf == 401 and f.upto is None and "swapped" in f.what, f


def test_backlog_swapped_leaves_of_one_partition_are_named(backlog, signer):
    store, _ = backlog
    a, b = store.leaf(500), store.leaf(504)
    db = sqlite3.connect(store.path)
    db.execute("UPDATE leaves SET hash = ?, data = ? WHERE idx = 500", (b[0], b[1]))
    db.execute("UPDATE leaves SET hash = ?, data = ? WHERE idx = 504", (a[0], a[1]))
    db.commit()
    db.close()
    f = first(LogStore(store.path, readonly=True), signer.verifier)
    assert f.leaf == 500 and f.upto is None, f
