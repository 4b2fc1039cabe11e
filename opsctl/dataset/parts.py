"""What a dataset folder holds: one Parquet part per partition (`part-00003.parquet`, written
in row groups through a temporary file and renamed when complete), `manifest.json` when the
build is complete, and `_checkpoint.json` while it runs (which partitions are done, and the
offsets the first run resolved, so a resumed build reads exactly the same records)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opsctl.toolkit.job_checkpoint import save_json
from precast.errors import ConfigError

FORMAT = 1
MANIFEST = "manifest.json"
CHECKPOINT = "_checkpoint.json"
ROW_GROUP = 65_536


def require_pyarrow() -> None:
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ConfigError(
            "precast dataset build writes Parquet with pyarrow, which is not installed: "
            "pip install 'precast[train]' (./dev setup installs it)"
        ) from None


def part_name(partition: int) -> str:
    return f"part-{partition:05d}.parquet"


def write_part(
    folder: Path,
    partition: int,
    cols: dict[str, Any],
    features: Sequence[str],
    row_group: int = ROW_GROUP,
) -> int:
    """Write one partition's rows; returns how many. The file appears complete or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(cols["label"])
    fixed = [
        ("device_id", pa.string()),
        ("entity_id", pa.string()),
        ("time_ms", pa.int64()),
        ("heartbeat_time_ms", pa.int64()),
        ("resolved_ms", pa.int64()),
        ("label", pa.string()),
        ("resolved_by", pa.string()),
    ]
    schema = pa.schema(
        [*fixed, ("partition", pa.int32()), *((name, pa.float32()) for name in features)]
    )
    arrays = [pa.array(cols[name], type=t) for name, t in fixed]
    arrays.append(pa.array([partition] * n, type=pa.int32()))
    arrays += [pa.array(cols[name], type=pa.float32()) for name in features]
    table = pa.Table.from_arrays(arrays, schema=schema)
    final = folder / part_name(partition)
    tmp = final.with_name(final.name + ".tmp")
    with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
        for start in range(0, n, row_group):
            w.write_table(table.slice(start, row_group))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    return n


def read_json(path: Path, what: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"unreadable {what} {path}: {exc}; move it away or pass --fresh"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{what} {path} is not a dataset file of format {FORMAT}")
    return doc


def save_checkpoint(folder: Path, doc: dict[str, Any]) -> None:
    save_json(folder / CHECKPOINT, {**doc, "format": FORMAT})


def clear(folder: Path) -> None:
    """Remove what a build writes (a fresh start); nothing else in the folder."""
    for p in folder.glob("part-*.parquet*"):
        p.unlink()
    for name in (MANIFEST, CHECKPOINT):
        (folder / name).unlink(missing_ok=True)


def load_manifest(folder: Path) -> dict[str, Any]:
    """A finished dataset's manifest (what `precast train --dataset` checks first)."""
    if not folder.is_dir():
        raise ConfigError(f"no dataset folder {folder}")
    doc = read_json(folder / MANIFEST, "dataset manifest")
    if doc is None:
        state = (
            "an unfinished build (run it again to finish)"
            if (folder / CHECKPOINT).exists()
            else "no dataset"
        )
        raise ConfigError(f"{folder} holds {state}: no {MANIFEST}")
    return doc
