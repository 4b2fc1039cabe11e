"""Checkpoints of a replay or redrive: where to continue after a crash, and where to look for
records the crashed run may have written without knowing it.

A checkpoint is saved only after the producer flushed (every record before it acknowledged),
so it says exactly: source records before `next[p]` are done, and every record this run wrote
to a target partition lies before `scan_from[t]` or was still unacknowledged. Saves are atomic
(temp file, fsync, rename): a kill -9 leaves the old checkpoint or the new one, never half.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from precast.errors import ConfigError

FORMAT = 1


def fingerprint(params: dict[str, Any]) -> str:
    """A stable id for "the same command": the same job resumes, a different one does not."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def save_json(path: Path, doc: Any) -> None:
    """Write a JSON document atomically and durably: a kill leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    # The rename itself must be durable too, or a crash can bring back the old file.
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def target_key(topic: str, partition: int) -> str:
    return f"{partition}@{topic}"


def parse_target_key(key: str) -> tuple[str, int]:
    p, topic = key.split("@", 1)
    return topic, int(p)


@dataclass
class Checkpoint:
    fingerprint: str
    run_id: str
    source_topic: str
    # partition -> [start, end): the offsets resolved by the first run; a resume keeps them.
    ranges: dict[int, list[int]]
    # partition -> next source offset to read; every record before it is written or filtered.
    next: dict[int, int]
    # "partition@topic" -> target offset: records this job wrote before it are all accounted.
    scan_from: dict[str, int]
    # "p|partition@topic" -> n: of the records from next[p] that go to that target partition,
    # the first n are already written (decided by a resume; see opsctl.toolkit.resume).
    skip: dict[str, int] = field(default_factory=dict)
    # The time window records must fall in ([start, end) ms), fixed by the first run.
    window: list[int] | None = None
    # Most source records a run reads past next[p] before it checkpoints: what a resume reads.
    read_bound: int = 0
    written: int = 0
    filtered: int = 0
    complete: bool = False
    started_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    updated_at_ms: int = 0
    resumes: int = 0
    format: int = FORMAT

    def remaining(self) -> int:
        return sum(max(0, self.ranges[p][1] - self.next[p]) for p in self.ranges)

    def save(self, path: Path) -> None:
        self.updated_at_ms = int(time.time() * 1000)
        save_json(path, asdict(self))

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        if not path.exists():
            return None
        try:
            raw = json.loads(path.read_text())
            if raw.get("format") != FORMAT:
                raise ValueError(f"format {raw.get('format')} (expected {FORMAT})")
            raw["ranges"] = {int(k): v for k, v in raw["ranges"].items()}
            raw["next"] = {int(k): v for k, v in raw["next"].items()}
            return cls(**raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(
                f"unreadable checkpoint {path}: {exc}; move it away or pass --fresh"
            ) from None


def load_for(path: Path, fp: str, fresh: bool) -> Checkpoint | None:
    """The checkpoint of this job at `path`, None for a fresh start; refuses another job's."""
    cp = None if fresh else Checkpoint.load(path)
    if cp is not None and cp.fingerprint != fp:
        raise ConfigError(
            f"checkpoint {path} belongs to another job; use another --checkpoint or --fresh"
        )
    return cp
