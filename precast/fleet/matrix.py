"""The worker's feature matrix from a table of rows, for training anywhere: `precast features`,
`precast train --data` and any notebook call `feature_matrix` (importable:
`from precast.fleet.matrix import feature_matrix, read_columns`).

A table holds either every expanded feature column of the spec (`cpu_pct`, ...,
`device_type=camera`: what `precast dataset build` writes) or the sources the features come from
(heartbeat fields and context values by name, categories as text). Sources go through the same
`FeatureModel.build` the worker runs (scale, clip, log1p, one-hot order, member_of, missing), so
a model trained elsewhere sees what the worker will feed it. Nothing is coerced or dropped
silently: `Coercions` counts every null that became a feature's missing value, every category
outside the vocabulary (all-zero one-hot, as the worker does) and every row dropped, by reason.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precast.errors import ConfigError
from precast.fleet.features import Standardization, member
from precast.fleet.runtime import Fleet


@dataclass
class Coercions:
    rows: int = 0
    null: Counter[str] = field(default_factory=Counter)  # column -> nulls given the missing rule
    unknown: Counter[str] = field(default_factory=Counter)  # column -> values not in vocabulary
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> rows left out

    def lines(self) -> list[str]:
        """One line per kind of coercion, for a command's summary (empty when none)."""
        out = []
        if self.null:
            out.append("nulls given the feature's missing value: " + _top(self.null))
        if self.unknown:
            out.append(
                "categories outside the vocabulary (all-zero one-hot): " + _top(self.unknown)
            )
        if self.dropped:
            out.append(f"rows dropped ({sum(self.dropped.values())}): " + _top(self.dropped))
        return out


def _top(c: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in c.most_common(6)) + (" ..." if len(c) > 6 else "")


@dataclass(frozen=True)
class Matrix:
    x: np.ndarray  # (kept rows, F) float32, columns in the spec's feature order
    kept: np.ndarray  # (input rows,) bool: which input rows `x` holds
    from_sources: bool  # computed from sources (False: the file had every feature column)
    coercions: Coercions


def read_columns(path: Path) -> dict[str, list[Any]]:
    """A CSV or Parquet file, or a folder of Parquet parts, as column name -> values."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    parts = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not parts:
        raise ConfigError(f"folder {path} holds no .parquet files")
    cols: dict[str, list[Any]] = {}
    for part in parts:
        try:
            is_parquet = part.suffix in (".parquet", ".pq")
            table = pq.read_table(part) if is_parquet else pacsv.read_csv(part)
        except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
            raise ConfigError(f"cannot read {part}: {exc}") from None
        for name in table.column_names:
            cols.setdefault(name, []).extend(table.column(name).to_pylist())
    return cols


def feature_matrix(
    fleet: Fleet, cols: Mapping[str, Sequence[Any]], stats: Standardization | None = None
) -> Matrix:
    """The (n, F) matrix the worker would compute for these rows. `stats` standardizes the
    spec's standardized features (a model manifest's `standardize`); without it they stay raw
    (training fits them: `FeatureModel.fit_standardization`)."""
    fm = fleet.features
    lengths = {len(v) for v in cols.values()}
    if len(lengths) > 1:
        raise ConfigError(f"columns of different lengths: {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    done = Coercions(rows=n)
    keep = np.ones(n, dtype=bool)
    if all(name in cols for name in fm.names):
        x = np.stack([_numbers(cols[c], c, keep, done) for c in fm.names], axis=1)
        done.null.clear()  # a null in an expanded column has no missing rule: its row goes
        bad = np.isnan(x).any(axis=1) & keep
        done.dropped["null in a feature column"] += int(bad.sum())
        keep &= ~bad
        x = x[keep].astype(np.float32)
        if stats is not None and fm.standardized:
            x = fm.standardize(x, stats)
        return Matrix(x, keep, False, done)
    need = [c.source if c.kind == "member" else c.name for c in fm.state]
    need += [c.by for c in fm.state if c.by] + list(fleet.context.names)
    absent = sorted({name for name in need if name not in cols})
    if absent:
        raise ConfigError(
            f"neither every feature column ({fm.names[0]}, ...) nor the sources they come from: "
            f"no column {absent[0]!r}"
        )
    state = np.empty((n, len(fm.state)), dtype=np.float64)
    for j, c in enumerate(fm.state):
        if c.kind == "numeric":
            state[:, j] = _numbers(cols[c.name], c.name, keep, done)
        elif c.kind == "code":
            state[:, j] = _codes(cols[c.name], c.name, c.vocabulary, done)
        else:
            by = cols[c.by] if c.by else [None] * n
            rows = (
                {c.source: s, **({c.by: b} if c.by else {})}
                for s, b in zip(cols[c.source], by, strict=True)
            )
            state[:, j] = [1.0 if member(c, r) else 0.0 for r in rows]
    empty = fleet.context.empty()
    context = np.zeros((n, len(fleet.context.names)), dtype=np.float64)
    for k, name in enumerate(fleet.context.names):
        col = _numbers(cols[name], name, keep, done)
        nulls = np.isnan(col)
        if nulls.any():  # a device with no such event: what the worker's empty context holds
            col = np.where(nulls, empty[k], col)
        context[:, k] = col
    x = fm.build(state[keep], context[keep], stats if fm.standardized else None)
    return Matrix(x, keep, True, done)


def _numbers(values: Sequence[Any], name: str, keep: np.ndarray, done: Coercions) -> np.ndarray:
    """Floats of a column: a null is NaN (counted; the feature's missing rule applies), text
    that is not a number drops its row (counted)."""
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out[i] = math.nan
            done.null[name] += 1
            continue
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            out[i] = math.nan
            if keep[i]:
                done.dropped[f"not a number in {name}"] += 1
            keep[i] = False
    return out


def _codes(
    values: Sequence[Any], name: str, vocabulary: tuple[str, ...], done: Coercions
) -> list[float]:
    index = {v: i for i, v in enumerate(vocabulary)}
    out = []
    for v in values:
        code = index.get(v) if isinstance(v, str) else None
        if code is None:
            if v is None:
                done.null[name] += 1
            else:
                done.unknown[name] += 1
        out.append(-1.0 if code is None else float(code))
    return out
