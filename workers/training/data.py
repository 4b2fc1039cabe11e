"""Labelled rows for training: from a file (CSV or Parquet, read with pyarrow) or from the fleet
spec's simulator.

A file holds a `label` column (one of the spec's labels) and either every expanded feature
column of the spec (`cpu_pct`, ..., `device_type=camera`: what `precast dataset build` writes)
or the raw sources the features are computed from (heartbeat fields and context values by
name, categories as text), which go through the spec's own feature matrix. A time column
(`time_ms`, `feature_time_ms` or `event_time_ms`) orders the rows for a time-based holdout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precast.errors import ConfigError
from precast.fleet import Fleet
from precast.fleet.features import member

TIME_COLUMNS = ("time_ms", "feature_time_ms", "event_time_ms")


@dataclass(frozen=True)
class Labelled:
    x: np.ndarray  # (n, F) float32
    y: np.ndarray  # (n,) label index into fleet.spec.labels
    time_ms: np.ndarray | None  # (n,) when the file has a time column
    source: str


def read_table(path: Path) -> dict[str, list[Any]]:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path) if path.suffix in (".parquet", ".pq") else pacsv.read_csv(path)
    except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
        raise ConfigError(f"cannot read training data {path}: {exc}") from None
    return {name: table.column(name).to_pylist() for name in table.column_names}


def from_file(fleet: Fleet, path: Path) -> Labelled:
    if path.is_dir():  # a dataset folder (precast dataset build): its Parquet parts
        parts = sorted(path.glob("*.parquet"))
        if not parts:
            raise ConfigError(f"training data folder {path} holds no .parquet files")
        cols: dict[str, list[Any]] = {}
        for part in parts:
            for k, v in read_table(part).items():
                cols.setdefault(k, []).extend(v)
    else:
        cols = read_table(path)
    if "label" not in cols:
        raise ConfigError(f"training data {path} has no `label` column")
    labels = {lab: i for i, lab in enumerate(fleet.spec.labels)}
    bad = sorted({str(v) for v in cols["label"] if v not in labels})
    if bad:
        raise ConfigError(
            f"training data {path}: label {bad[0]!r} is not one of the spec's {list(labels)}"
        )
    y = np.asarray([labels[v] for v in cols["label"]], dtype=np.int64)
    names = fleet.features.names
    if all(n in cols for n in names):
        x = np.asarray([cols[n] for n in names], dtype=np.float32).T
    else:
        x = _from_sources(fleet, cols, path)
    t = next((np.asarray(cols[c], dtype=np.int64) for c in TIME_COLUMNS if c in cols), None)
    return Labelled(x, y, t, str(path))


def _from_sources(fleet: Fleet, cols: dict[str, list[Any]], path: Path) -> np.ndarray:
    fm, ctx = fleet.features, fleet.context
    need = [c.source if c.kind == "member" else c.name for c in fm.state] + [
        c.by for c in fm.state if c.by
    ]
    missing = sorted({n for n in [*need, *ctx.names] if n not in cols})
    if missing:
        raise ConfigError(
            f"training data {path}: neither the feature columns ({fm.names[0]}, ...) nor the "
            f"sources they come from: no column {missing[0]!r}"
        )
    n = len(cols["label"])
    state = np.empty((n, len(fm.state)), dtype=np.float64)
    for j, c in enumerate(fm.state):
        if c.kind == "numeric":
            state[:, j] = [np.nan if v is None else float(v) for v in cols[c.name]]
        elif c.kind == "code":
            index = {v: i for i, v in enumerate(c.vocabulary)}
            state[:, j] = [index.get(v, -1) for v in cols[c.name]]
        else:
            rows = [
                {c.source: s, **({c.by: b} if c.by else {})}
                for s, b in zip(cols[c.source], cols[c.by] if c.by else cols[c.source], strict=True)
            ]
            state[:, j] = [1.0 if member(c, r) else 0.0 for r in rows]
    context = np.asarray([cols[name] for name in ctx.names], dtype=np.float64).T
    if context.size == 0:
        context = np.zeros((n, 0))
    return fm.build(state, context)


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
