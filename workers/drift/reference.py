"""The drift reference of a model version: a sorted sample of its training features, shipped
next to model.onnx as `drift-reference.npz` (written by `workers.training.train`).

Frozen per model version, so "drift" always means "the live features no longer look like what
this model was trained on", and a retrained model brings its own reference. Only the features
computed from the heartbeat alone are monitored (the fleet spec says which): the context values
need the device-context topic and a join.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from precast.errors import ConfigError
from precast.fleet.features import FeatureModel

FILE_NAME = "drift-reference.npz"
# Enough that the reference's own sampling error (~1/sqrt(m)) is far below the effect floor.
DEFAULT_ROWS = 20_000


def monitored(features: FeatureModel) -> tuple[str, ...]:
    return tuple(features.names[i] for i in features.heartbeat_columns)


@dataclass(frozen=True)
class Reference:
    model_version: str
    features: tuple[str, ...]
    sorted_values: np.ndarray  # (k, m) float64, each row sorted

    @property
    def rows(self) -> int:
        return int(self.sorted_values.shape[1])


def build_reference(
    x: np.ndarray, model_version: str, features: FeatureModel, rows: int = DEFAULT_ROWS
) -> Reference:
    """The monitored columns of the first `rows` training rows (training rows are i.i.d.)."""
    sample = np.asarray(x[:rows][:, features.heartbeat_columns], dtype=np.float64)
    return Reference(model_version, monitored(features), np.sort(sample.T, axis=1))


def save_reference(ref: Reference, model_dir: Path) -> Path:
    path = model_dir / FILE_NAME
    np.savez_compressed(
        path,
        sorted_values=ref.sorted_values.astype(np.float32),
        meta=np.frombuffer(
            json.dumps({"model_version": ref.model_version, "features": ref.features}).encode(),
            dtype=np.uint8,
        ),
    )
    return path


def load_reference(model_dir: Path, features: FeatureModel) -> Reference:
    path = model_dir / FILE_NAME
    try:
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes())
            values = np.sort(z["sorted_values"].astype(np.float64), axis=1)
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(
            f"no usable drift reference at {path} ({exc.__class__.__name__}); "
            "a model trained by `precast train` ships one"
        ) from None
    names, want = tuple(meta["features"]), monitored(features)
    if names != want:
        raise ConfigError(
            f"drift reference {path} holds features {list(names)}, this fleet spec monitors "
            f"{list(want)}"
        )
    return Reference(meta["model_version"], names, values)
