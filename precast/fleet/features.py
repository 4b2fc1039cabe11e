"""The feature matrix of a fleet spec, compiled: raw state columns of a device's newest heartbeat
plus its context values -> the model's (n, F) float32 input, one vectorized numpy step per
feature and batch (never a Python loop over events).

State columns are what the worker keeps per device from a heartbeat (its device table and its
changelog record hold exactly these): the numeric fields features read (NaN where a value was
nulled), the code of each one-hot source (its vocabulary index, -1 for unknown), and the
membership flag of each member_of feature (0/1, computed when the heartbeat is decoded, because
it compares texts). Training, serving, the drift monitor, the shadow run and dataset builds all
go through `FeatureModel.build`, so a model never sees features computed two different ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from precast.fleet.context import ContextModel
from schemas.spec import FleetSpec, feature_hash
from schemas.spec.features import Feature
from schemas.spec.fields import Boolean, Categorical

Standardization = Mapping[str, tuple[float, float]]  # feature name -> (mean, std)


@dataclass(frozen=True)
class StateColumn:
    name: str  # the field's name, or the member_of feature's
    kind: str  # numeric | code | member
    fill: float  # its value for a device without a heartbeat (and where NaN)
    vocabulary: tuple[str, ...] = ()  # code: the categorical's values
    source: str = ""  # member: the field tested
    by: str | None = None  # member: the field its table is keyed by
    values: Any = None  # member: tuple of texts, or {by value: tuple of texts}


class FeatureModel:
    def __init__(self, spec: FleetSpec, context: ContextModel | None = None) -> None:
        self.spec = spec
        self.context = context or ContextModel(spec)
        self.hash = feature_hash(spec)
        self.names: tuple[str, ...] = spec.feature_names
        self.labels: tuple[str, ...] = spec.labels
        self.state: tuple[StateColumn, ...] = self._state_columns(spec)
        self.state_names = tuple(c.name for c in self.state)
        self._state_index = {c.name: i for i, c in enumerate(self.state)}
        self.fill = np.array([c.fill for c in self.state], dtype=np.float64)
        scale: list[float] = []
        monitored: list[int] = []
        for f in spec.features:
            cols = f.columns(spec.vocabulary(f))
            if spec.field(f.source) is not None:
                monitored += range(len(scale), len(scale) + len(cols))
            scale += [f.change_scale] * len(cols)
        self.change_scale = np.asarray(scale, dtype=np.float32)
        # columns computed from the heartbeat alone (the drift monitor tests these)
        self.heartbeat_columns = np.asarray(monitored, dtype=np.int64)
        self.standardized = tuple(f.name for f in spec.features if f.transform == "standardize")

    @property
    def width(self) -> int:
        return len(self.names)

    @staticmethod
    def _state_columns(spec: FleetSpec) -> tuple[StateColumn, ...]:
        out: dict[str, StateColumn] = {}
        for f in spec.features:
            field = spec.field(f.source)
            if field is None:
                continue  # a context value
            if f.transform == "member_of":
                fill = float(f.missing) if f.missing is not None else 0.0
                out[f.name] = StateColumn(f.name, "member", fill, (), f.source, f.by, f.values)
            elif isinstance(field, Categorical):
                code = field.values.index(f.missing) if isinstance(f.missing, str) else -1
                out.setdefault(f.source, StateColumn(f.source, "code", float(code), field.values))
            else:
                fill = float(f.missing) if isinstance(f.missing, int | float) else 0.0
                if isinstance(field, Boolean) and f.missing is None and field.default is not None:
                    fill = float(field.default)
                out.setdefault(f.source, StateColumn(f.source, "numeric", fill))
        return tuple(out.values())

    def fit_standardization(self, x: np.ndarray) -> dict[str, tuple[float, float]]:
        """(mean, std) of each standardized feature over the raw rows `x` (built without
        statistics): what a trained model keeps in its manifest."""
        out = {}
        for name in self.standardized:
            col = np.asarray(x[:, self.names.index(name)], dtype=np.float64)
            std = float(col.std())
            out[name] = (round(float(col.mean()), 6), round(std if std > 1e-9 else 1.0, 6))
        return out

    def standardize(self, x: np.ndarray, stats: Standardization) -> np.ndarray:
        """Raw rows (built without statistics) with their standardized columns scaled."""
        x = np.array(x, dtype=np.float32, copy=True)
        for name in self.standardized:
            j = self.names.index(name)
            mean, std = stats[name]
            x[:, j] = (x[:, j].astype(np.float64) - mean) / std
        return x

    # -- one heartbeat (the slow path, and the reference for the worker's fast path) -------------
    def state_row(self, event: Mapping[str, Any]) -> list[float]:
        """The state columns of one normalized heartbeat (schemas.wire)."""
        row = []
        for c in self.state:
            if c.kind == "numeric":
                v = event.get(c.name)
                row.append(float("nan") if v is None else float(v))
            elif c.kind == "code":
                v = event.get(c.name)
                row.append(float(c.vocabulary.index(v)) if v in c.vocabulary else -1.0)
            else:
                row.append(1.0 if member(c, event) else 0.0)
        return row

    # -- a batch ---------------------------------------------------------------------------------
    def build(
        self, state: np.ndarray, context: np.ndarray, stats: Standardization | None = None
    ) -> np.ndarray:
        """(n, F) float32 features from (n, S) state columns and (n, C) context values."""
        n = len(state)
        x = np.empty((n, self.width), dtype=np.float32)
        j = 0
        for f in self.spec.features:
            j = self._feature(f, x, j, state, context, stats)
        return x

    def _source(self, f: Feature, state: np.ndarray, context: np.ndarray) -> np.ndarray:
        i = self._state_index.get(f.name if f.transform == "member_of" else f.source)
        if i is not None:
            col = state[:, i]
            if np.isnan(col).any():  # nulled metrics: the missing rule
                col = np.where(np.isnan(col), self.fill[i], col)
            return col
        c: np.ndarray = context[:, self.context.names.index(f.source)]
        return c

    def _feature(
        self,
        f: Feature,
        x: np.ndarray,
        j: int,
        state: np.ndarray,
        context: np.ndarray,
        stats: Standardization | None,
    ) -> int:
        src = self._source(f, state, context)
        t = f.transform
        if t == "one_hot":
            k = len(self.spec.vocabulary(f))
            x[:, j : j + k] = src[:, None] == np.arange(k)[None, :]
            return j + k
        if t == "member_of":
            x[:, j] = src
            return j + 1
        v = np.asarray(src, dtype=np.float64)
        if f.scale != 1.0:
            v = v / f.scale
        if t == "log1p":
            v = np.log1p(v)
        elif t == "clip":
            assert f.clip is not None
            v = np.clip(v, f.clip[0], f.clip[1])
        elif t == "standardize" and stats is not None:
            # without statistics (training rows before they are fitted) the raw value; a model
            # always brings them (workers.model.manifest refuses one that does not)
            if f.name not in stats:
                raise ValueError(f"feature {f.name!r} is standardized: no statistics for it")
            mean, std = stats[f.name]
            v = (v - mean) / (std if std > 0 else 1.0)
        x[:, j] = v
        return j + 1


def member(c: StateColumn, event: Mapping[str, Any]) -> bool:
    """The membership flag of a member_of column for one normalized heartbeat."""
    v = event.get(c.source)
    if v is None:
        return bool(c.fill)
    if c.by is None:
        return v in c.values
    return v in c.values.get(event.get(c.by), ())
