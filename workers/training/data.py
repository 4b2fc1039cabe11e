"""Labelled rows for training: from a file (CSV or Parquet, read with pyarrow) or from the fleet
spec's simulator.

A file holds a `label` column (one of the spec's labels) and either every expanded feature
column of the spec (`cpu_pct`, ..., `device_type=camera`: what `precast dataset build` writes)
or the raw sources the features are computed from (heartbeat fields and context values by
name, categories as text), which go through the spec's own feature matrix. A time column
(named with --time-column, else the first of TIME_COLUMNS present) orders the rows for a
time-based holdout. The features come from `precast.fleet.matrix`, the same public builder
`precast features` runs, which counts what it coerced or dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from precast.errors import ConfigError
from precast.fleet import Fleet
from precast.fleet.matrix import Coercions, feature_matrix, read_columns

# Looked for, in this order, when no --time-column is named.
TIME_COLUMNS = ("time_ms", "feature_time_ms", "event_time_ms", "event_time", "time", "timestamp")


@dataclass(frozen=True)
class Labelled:
    x: np.ndarray  # (n, F) float32
    y: np.ndarray  # (n,) label index into fleet.spec.labels
    time_ms: np.ndarray | None  # (n,) when the file has a time column
    source: str
    time_column: str | None = None  # the column `time_ms` came from
    coercions: Coercions | None = None  # what reading the file coerced or dropped


def from_file(fleet: Fleet, path: Path, time_column: str | None = None) -> Labelled:
    """Rows of a CSV/Parquet file or a folder of Parquet parts, features through the spec
    (precast.fleet.matrix). The time column orders the holdout: `time_column` when named
    (an error when absent), else the first of TIME_COLUMNS the file has."""
    cols = read_columns(path)
    if "label" not in cols:
        raise ConfigError(f"training data {path} has no `label` column")
    labels = {lab: i for i, lab in enumerate(fleet.spec.labels)}
    bad = sorted({str(v) for v in cols["label"] if v not in labels})
    if bad:
        raise ConfigError(
            f"training data {path}: label {bad[0]!r} is not one of the spec's {list(labels)}"
        )
    if time_column is not None and time_column not in cols:
        raise ConfigError(f"training data {path} has no time column {time_column!r}")
    column = time_column or next((c for c in TIME_COLUMNS if c in cols), None)
    try:
        m = feature_matrix(fleet, cols)
    except ConfigError as exc:
        raise ConfigError(f"training data {path}: {exc}") from None
    y = np.asarray([labels[v] for v in cols["label"]], dtype=np.int64)[m.kept]
    t = None
    if column is not None:
        t = np.asarray(_times_ms(cols[column], column, path), dtype=np.int64)[m.kept]
    return Labelled(m.x, y, t, str(path), column, m.coercions)


def _times_ms(values: list[Any], column: str, path: Path) -> list[int]:
    """Milliseconds since the epoch from epoch milliseconds, timestamps or ISO 8601 text."""
    out = []
    for v in values:
        try:
            if isinstance(v, datetime):
                when = v if v.tzinfo is not None else v.replace(tzinfo=UTC)
                out.append(int(when.timestamp() * 1000))
            elif isinstance(v, str):
                when = datetime.fromisoformat(v.replace("Z", "+00:00"))
                when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
                out.append(int(when.timestamp() * 1000))
            else:
                out.append(int(v))
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(
                f"training data {path}: time column {column!r} holds {v!r}: give epoch "
                "milliseconds, timestamps or ISO 8601 text"
            ) from None
    return out


def from_dataset(fleet: Fleet, folder: Path) -> tuple[Labelled, dict[str, Any]]:
    """The rows of a `precast dataset build` folder and its manifest, after checking that the
    dataset was built for this fleet spec's features (the same feature hash and columns)."""
    path = folder / "manifest.json"
    if not folder.is_dir():
        raise ConfigError(f"no dataset folder {folder}")
    try:
        manifest = json.loads(path.read_text())
        built = manifest["fleet"]
        hash_, names = str(built["feature_hash"]), tuple(manifest["features"])
    except FileNotFoundError:
        unfinished = (folder / "_checkpoint.json").exists()
        what = (
            "an unfinished build (run the same precast dataset build again)"
            if unfinished
            else "no dataset"
        )
        raise ConfigError(f"{folder} holds {what}: no manifest.json") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"unreadable dataset manifest {path}: {exc}") from None
    if hash_ != fleet.features.hash or names != fleet.features.names:
        raise ConfigError(
            f"dataset {folder} was built for fleet spec {built.get('name')!r} "
            f"v{built.get('version')} (features {hash_[:12]}); this trainer runs "
            f"{fleet.describe()}: rebuild the dataset, or train with the spec it was built for "
            "(--spec / PRECAST_FLEET__SPEC)"
        )
    rows = int(manifest.get("counts", {}).get("rows", 0))
    if rows == 0:
        raise ConfigError(f"dataset {folder} has no rows: no resolved work order in its range")
    data = from_file(fleet, folder)
    r = manifest.get("range", {})
    source = f"dataset {folder} ({rows} rows, work orders opened {r.get('from')} .. {r.get('to')})"
    return Labelled(data.x, data.y, data.time_ms, source), manifest


def from_simulator(fleet: Fleet, n: int, seed: int) -> Labelled:
    from precast.fleet.simulate.training import training_rows

    if fleet.spec.simulator is None or not fleet.spec.simulator.conditions:
        raise ConfigError(
            f"fleet spec {fleet.name!r} declares no [[simulator.conditions]]: there is no ground "
            "truth to simulate; train from a labelled file (--data) instead"
        )
    x, y = training_rows(fleet, n, seed)
    return Labelled(x, y, None, f"simulated {fleet.name} fleet, seed {seed}")
