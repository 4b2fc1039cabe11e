"""The durable log: one SQLite database (WAL) holding the leaves, the inner nodes kept for
proofs, the tree's frontier, the consumed topic offsets and every signed checkpoint.

Leaves, frontier and offsets of a batch are written in one transaction, so after a kill -9 the
log and the position in the topic agree: the auditor resumes at the stored offsets and no record
is appended twice or skipped. Batches commit with `synchronous=NORMAL` (durable against a process
crash); a checkpoint row is committed with `synchronous=FULL`, whose WAL fsync also makes every
earlier batch durable on disk, before the checkpoint is published anywhere."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from precast.audit.compact import CompactRange

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leaves(
    idx INTEGER PRIMARY KEY, hash BLOB NOT NULL, data BLOB NOT NULL,
    part INTEGER NOT NULL, off INTEGER NOT NULL, device TEXT, computed_at INTEGER);
CREATE INDEX IF NOT EXISTS leaves_by_offset ON leaves(part, off);
CREATE INDEX IF NOT EXISTS leaves_by_device ON leaves(device, computed_at);
CREATE TABLE IF NOT EXISTS nodes(
    level INTEGER, idx INTEGER, hash BLOB NOT NULL, PRIMARY KEY(level, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offsets(part INTEGER PRIMARY KEY, next INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints(
    size INTEGER PRIMARY KEY, root BLOB NOT NULL, note TEXT NOT NULL, at_ms INTEGER NOT NULL);
"""


# (idx, hash, data, partition, offset, device, computed_at) of one stored leaf.
Row = tuple[int, bytes, bytes, int, int, str | None, int | None]


class StoreError(RuntimeError):
    """The log database is missing, unreadable, or belongs to another log."""


@dataclass(frozen=True)
class StoredCheckpoint:
    size: int
    root: bytes
    note: str
    at_ms: int


# One appended leaf as the store keeps it: data, hash, partition, offset, device, computed_at.
LeafRow = tuple[bytes, bytes, int, int, str | None, int | None]


class LogStore:
    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly:
            if not self.path.exists():
                raise StoreError(f"no audit log at {self.path}")
            uri = f"file:{self.path}?mode=ro"
            self.db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        try:
            self.db.execute("SELECT 1 FROM meta LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not an audit log: {exc}") from None

    def close(self) -> None:
        self.db.close()

    # -- identity ---------------------------------------------------------------------------------
    def meta(self, key: str) -> object | None:
        row = self.db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def bind(self, origin: str, topic: str) -> None:
        """Tie a new log to its origin and topic; refuse to reuse a log made for another."""
        for key, want in (("origin", origin), ("topic", topic)):
            have = self.meta(key)
            if have is None:
                self.db.execute("INSERT INTO meta(k, v) VALUES (?, ?)", (key, want))
            elif have != want:
                raise StoreError(f"{self.path} is the log of {key} {have!r}, not {want!r}")

    def holds_a_log(self) -> bool:
        """Anything a signing key has vouched for, or will: leaves, checkpoints, a bound key."""
        return (
            self.size() > 0
            or self.latest_checkpoint() is not None
            or self.meta("key_id") is not None
        )

    def bind_key(self, key_id: str, verifier: str, signs_latest: bool) -> None:
        """Tie the log to its signing key (key ID and verifier key): a log is signed by one key
        for its whole life, so another key is refused. A log from before this binding is bound
        to the given key only when that key signed its newest checkpoint (`signs_latest`)."""
        have = self.meta("key_id")
        if have is None:
            if self.latest_checkpoint() is not None and not signs_latest:
                raise StoreError(
                    f"{self.path}'s newest checkpoint is not signed by key {key_id}: this is "
                    "not the key of this log"
                )
            self.db.execute(
                "INSERT INTO meta(k, v) VALUES (?, ?), (?, ?)",
                ("key_id", key_id, "verifier", verifier),
            )
        elif have != key_id:
            raise StoreError(
                f"{self.path} is signed by key {have} ({self.meta('verifier')}), not {key_id}: "
                "a log keeps its key; to change keys start a new log (docs/audit.md, key handling)"
            )

    # -- state --------------------------------------------------------------------------------------
    def size(self) -> int:
        value = self.meta("size")
        return int(value) if value is not None else 0  # type: ignore[call-overload]

    def frontier(self) -> CompactRange:
        blob = self.meta("frontier")
        return CompactRange.from_bytes(self.size(), blob if isinstance(blob, bytes) else b"")

    def offsets(self) -> dict[int, int]:
        return dict(self.db.execute("SELECT part, next FROM offsets").fetchall())

    # -- writing ------------------------------------------------------------------------------------
    def append(
        self,
        rows: Sequence[LeafRow],
        frontier: CompactRange,
        nodes: Sequence[tuple[int, int, bytes]],
        offsets: dict[int, int],
    ) -> None:
        """Leaves (indexes continuing the log), new inner nodes, the frontier after them and the
        next offset of each partition, in one transaction."""
        start = frontier.size - len(rows)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            if start != self.size():
                raise StoreError(f"append at {start} but the log has {self.size()} leaves")
            db.executemany(
                "INSERT INTO leaves(idx, data, hash, part, off, device, computed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(start + i, *r) for i, r in enumerate(rows)],
            )
            db.executemany("INSERT INTO nodes(level, idx, hash) VALUES (?, ?, ?)", nodes)
            db.executemany(
                "INSERT INTO offsets(part, next) VALUES (?, ?)"
                " ON CONFLICT(part) DO UPDATE SET next = excluded.next",
                list(offsets.items()),
            )
            db.executemany(
                "INSERT INTO meta(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                [("size", frontier.size), ("frontier", frontier.to_bytes())],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def add_checkpoint(self, size: int, root: bytes, note: str, at_ms: int) -> None:
        """Store a signed checkpoint with a full fsync of the WAL (and so of every leaf before it)."""
        self.db.execute("PRAGMA synchronous=FULL")
        try:
            self.db.execute(
                "INSERT OR REPLACE INTO checkpoints(size, root, note, at_ms) VALUES (?, ?, ?, ?)",
                (size, root, note, at_ms),
            )
        finally:
            self.db.execute("PRAGMA synchronous=NORMAL")

    # -- reading ------------------------------------------------------------------------------------
    def latest_checkpoint(self) -> StoredCheckpoint | None:
        row = self.db.execute(
            "SELECT size, root, note, at_ms FROM checkpoints ORDER BY size DESC LIMIT 1"
        ).fetchone()
        return None if row is None else StoredCheckpoint(*row)

    def checkpoint(self, size: int) -> StoredCheckpoint | None:
        row = self.db.execute(
            "SELECT size, root, note, at_ms FROM checkpoints WHERE size = ?", (size,)
        ).fetchone()
        return None if row is None else StoredCheckpoint(*row)

    def checkpoints(self) -> list[StoredCheckpoint]:
        rows = self.db.execute("SELECT size, root, note, at_ms FROM checkpoints ORDER BY size")
        return [StoredCheckpoint(*r) for r in rows]

    def leaf_hashes(self, lo: int, hi: int) -> list[bytes]:
        rows = self.db.execute(
            "SELECT hash FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx", (lo, hi)
        )
        return [r[0] for r in rows]

    def node_hashes(self, level: int, lo: int, hi: int) -> list[bytes]:
        rows = self.db.execute(
            "SELECT hash FROM nodes WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx",
            (level, lo, hi),
        )
        return [r[0] for r in rows]

    def leaf(self, idx: int) -> tuple[bytes, bytes] | None:
        """(hash, data) of one leaf."""
        row: tuple[bytes, bytes] | None = self.db.execute(
            "SELECT hash, data FROM leaves WHERE idx = ?", (idx,)
        ).fetchone()
        return row

    def find_by_offset(self, partition: int, offset: int) -> int | None:
        row = self.db.execute(
            "SELECT idx FROM leaves WHERE part = ? AND off = ? ORDER BY idx LIMIT 1",
            (partition, offset),
        ).fetchone()
        return None if row is None else row[0]

    def find_by_device(self, device: str, computed_at_ms: int | None = None) -> list[int]:
        """Leaves of a device (with that computed_at when given), oldest first."""
        if computed_at_ms is None:
            rows = self.db.execute(
                "SELECT idx FROM leaves WHERE device = ? ORDER BY idx", (device,)
            )
        else:
            rows = self.db.execute(
                "SELECT idx FROM leaves WHERE device = ? AND computed_at = ? ORDER BY idx",
                (device, computed_at_ms),
            )
        return [r[0] for r in rows]

    def rows(self, lo: int, hi: int) -> list[Row]:
        """Leaves [lo, hi) with the columns stored beside them, in index order."""
        return self.db.execute(
            "SELECT idx, hash, data, part, off, device, computed_at FROM leaves "
            "WHERE idx >= ? AND idx < ? ORDER BY idx",
            (lo, hi),
        ).fetchall()

    def iter_leaves(self, batch: int = 50_000) -> Iterator[list[tuple[int, bytes, bytes]]]:
        """Every stored leaf as batches of (idx, hash, data), in index order."""
        cur = self.db.execute("SELECT idx, hash, data FROM leaves ORDER BY idx")
        while rows := cur.fetchmany(batch):
            yield rows
