"""The feature matrix of a fleet spec, compiled: raw state columns of a device's newest heartbeat
plus its context values -> the model's (n, F) float32 input, one vectorized numpy step per
batch for all the spec's features (never a Python loop over events).

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
from functools import cached_property
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
        """(n, F) float32 features from (n, S) state columns and (n, C) context values: the
        compiled plan (`_Plan`), a dozen numpy steps per batch however many features the spec
        declares. A worker batch at a light load holds a few events, and one numpy step per
        feature and transform was most of what such a batch cost (docs/workers.md)."""
        return self._plan.build(state, context, stats)

    def build_each(
        self, state: np.ndarray, context: np.ndarray, stats: Standardization | None = None
    ) -> np.ndarray:
        """`build` one feature at a time, as the spec reads: the reference the plan is tested
        against (tests/unit/test_feature_plan.py), not used on any path."""
        n = len(state)
        x = np.empty((n, self.width), dtype=np.float32)
        j = 0
        for f in self.spec.features:
            j = self._feature(f, x, j, state, context, stats)
        return x

    @cached_property
    def _plan(self) -> _Plan:
        return _Plan(self)

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


def ints(xs: list[int]) -> np.ndarray:
    return np.asarray(xs, dtype=np.int64)


class _Plan:
    """`FeatureModel.build` compiled once per spec: every single-column feature (identity,
    log1p, clip, standardize, member_of) is a gather from the state or context columns, one
    division by a vector of scales, and one step per transform over the columns that have it;
    only one-hot features keep a step each. Each element takes the same float64 operations, in
    the same order, as `build_each` (a division by 1.0 and a clip to +-inf change nothing)."""

    def __init__(self, fm: FeatureModel) -> None:
        spec, self.width = fm.spec, fm.width
        out: list[int] = []  # output column of each single-column feature
        s_pos: list[int] = []  # its place in the dense block, when it reads a state column
        s_idx: list[int] = []
        c_pos: list[int] = []  # ... when it reads a context value
        c_idx: list[int] = []
        scale: list[float] = []
        log1p: list[int] = []
        clip_at: list[int] = []
        lo: list[float] = []
        hi: list[float] = []
        self.standardized: list[tuple[int, str]] = []  # (dense place, feature name)
        self.one_hot: list[tuple[int, int, bool, int]] = []  # (out col, k, from state, index)
        j = 0
        for f in spec.features:
            key = f.name if f.transform == "member_of" else f.source
            i = fm._state_index.get(key)
            src = (True, i) if i is not None else (False, fm.context.names.index(f.source))
            if f.transform == "one_hot":
                k = len(spec.vocabulary(f))
                self.one_hot.append((j, k, *src))
                j += k
                continue
            d = len(out)
            out.append(j)
            (s_pos if src[0] else c_pos).append(d)
            (s_idx if src[0] else c_idx).append(src[1])
            scale.append(1.0 if f.transform == "member_of" else f.scale)
            if f.transform == "log1p":
                log1p.append(d)
            elif f.transform == "clip":
                assert f.clip is not None
                clip_at.append(d)
                lo.append(f.clip[0])
                hi.append(f.clip[1])
            elif f.transform == "standardize":
                self.standardized.append((d, f.name))
            j += 1
        self.out, self.s_pos, self.s_idx = ints(out), ints(s_pos), ints(s_idx)
        self.c_pos, self.c_idx = ints(c_pos), ints(c_idx)
        self.s_fill = fm.fill[self.s_idx]
        self.scale = np.asarray(scale, dtype=np.float64)
        self.scaled = bool((self.scale != 1.0).any())
        self.log1p, self.clip_at = ints(log1p), ints(clip_at)
        self.lo, self.hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        self.fill = fm.fill
        self.identity_out = bool((self.out == np.arange(len(out))).all()) and not self.one_hot

    def build(
        self, state: np.ndarray, context: np.ndarray, stats: Standardization | None
    ) -> np.ndarray:
        v = self._dense(state, context, stats)
        if self.identity_out:
            return v.astype(np.float32)
        x = np.empty((len(state), self.width), dtype=np.float32)
        x[:, self.out] = v
        for j, k, from_state, i in self.one_hot:
            if from_state:
                src = state[:, i]
                if np.isnan(src).any():
                    src = np.where(np.isnan(src), self.fill[i], src)
            else:
                src = context[:, i]
            x[:, j : j + k] = src[:, None] == np.arange(k)[None, :]
        return x

    def _dense(
        self, state: np.ndarray, context: np.ndarray, stats: Standardization | None
    ) -> np.ndarray:
        """The single-column features, (n, D) float64."""
        v = np.empty((len(state), len(self.out)), dtype=np.float64)
        if len(self.s_idx):
            s = state[:, self.s_idx]
            nan = np.isnan(s)
            if nan.any():  # nulled metrics: the missing rule
                s = np.where(nan, self.s_fill, s)
            v[:, self.s_pos] = s
        if len(self.c_idx):
            v[:, self.c_pos] = context[:, self.c_idx]
        if self.scaled:
            v /= self.scale
        if len(self.log1p):
            v[:, self.log1p] = np.log1p(v[:, self.log1p])
        if len(self.clip_at):
            v[:, self.clip_at] = np.clip(v[:, self.clip_at], self.lo, self.hi)
        for d, name in self.standardized if stats is not None else ():
            assert stats is not None
            if name not in stats:
                raise ValueError(f"feature {name!r} is standardized: no statistics for it")
            mean, std = stats[name]
            v[:, d] = (v[:, d] - mean) / (std if std > 0 else 1.0)
        return v


def member(c: StateColumn, event: Mapping[str, Any]) -> bool:
    """The membership flag of a member_of column for one normalized heartbeat."""
    v = event.get(c.source)
    if v is None:
        return bool(c.fill)
    if c.by is None:
        return v in c.values
    return v in c.values.get(event.get(c.by), ())
