"""A registry candidate made from another version (`precast distill`, `precast quantize`): where
its rows come from, where it goes, and its manifest, which names the version it came from and
the method.

A candidate never serves by being written: in a registry without ACTIVE the highest version
serves, so before the first candidate lands there ACTIVE is pinned to the version that serves
now (one line says so). `precast promote` then gates it like any candidate.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precast.errors import ConfigError
from precast.fleet import Fleet
from precast.models import layout
from workers.model.inference import PROBE_FILE
from workers.model.manifest import Manifest, binding

DEFAULT_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


@dataclass(frozen=True)
class Rows:
    """Feature rows to run a model on: `x` raw as `FeatureModel.build` makes them without
    statistics (`standardized` False), or already the model's input (a model's probe.npy)."""

    x: np.ndarray
    y: np.ndarray | None  # label indexes where the rows are labelled
    source: str
    standardized: bool = False
    dataset: dict[str, Any] | None = None
    time_ms: np.ndarray | None = None  # when the rows have a time (a dataset's opens)

    def model_input(self, fleet: Fleet, manifest: Manifest) -> np.ndarray:
        """The rows as the worker feeds `manifest`'s model: its statistics applied."""
        fm = fleet.features
        if self.standardized or not fm.standardized:
            return np.asarray(self.x, dtype=np.float32)
        return fm.standardize(self.x, manifest.standardization)

    def split(self, holdout: float, seed: int) -> tuple[Rows, Rows]:
        """(older or random part, held-out part): the newest rows when they have a time (as
        `precast train` holds out), else a random share."""
        n = len(self.x)
        cut = int(n * (1 - holdout))
        order = (
            np.argsort(self.time_ms, kind="stable")
            if self.time_ms is not None
            else np.random.default_rng(seed).permutation(n)
        )

        def part(i: np.ndarray) -> Rows:
            y = None if self.y is None else self.y[i]
            t = None if self.time_ms is None else self.time_ms[i]
            return Rows(self.x[i], y, self.source, self.standardized, self.dataset, t)

        return part(order[:cut]), part(order[cut:])


def rows_from(
    fleet: Fleet,
    *,
    simulate: int | None = None,
    dataset: Path | None = None,
    data: Path | None = None,
    probe_of: Path | None = None,
    seed: int = 7,
) -> Rows:
    """Rows from one source: the simulator (labelled by its ground truth), a `precast dataset
    build` folder (labelled by resolved work orders), a file of features or sources (labelled
    when it has a `label` column), or a model folder's probe.npy (its training rows)."""
    from workers.training.data import from_dataset, from_simulator

    if simulate:
        d = from_simulator(fleet, simulate, seed)
        return Rows(d.x, d.y, d.source)
    if dataset is not None:
        d, manifest = from_dataset(fleet, dataset)
        ref = {"folder": str(dataset), **_ref(manifest)}
        return Rows(d.x, d.y, d.source, dataset=ref, time_ms=d.time_ms)
    if data is not None:
        from precast.fleet.matrix import feature_matrix, read_columns

        cols = read_columns(data)
        m = feature_matrix(fleet, cols)
        for line in m.coercions.lines():
            print(f"{data}: {line}", file=sys.stderr)
        y = None
        if "label" in cols:
            index = {lab: i for i, lab in enumerate(fleet.spec.labels)}
            kept = [v for v, k in zip(cols["label"], m.kept, strict=True) if k]
            if all(v in index for v in kept):
                y = np.asarray([index[v] for v in kept], dtype=np.int64)
        return Rows(m.x, y, f"file {data}")
    if probe_of is not None:
        path = probe_of / PROBE_FILE
        if not path.exists():
            raise ConfigError(
                f"{probe_of} has no {PROBE_FILE}: give rows (--simulate ROWS, --dataset DIR or "
                "--data FILE)"
            )
        x = np.load(path, allow_pickle=False)
        return Rows(np.asarray(x, dtype=np.float32), None, f"{path}", standardized=True)
    raise ConfigError("no rows: give --simulate ROWS, --dataset DIR or --data FILE")


def _ref(m: dict[str, Any]) -> dict[str, Any]:
    r = m.get("range", {})
    return {
        "fingerprint": m.get("fingerprint"),
        "rows": m.get("counts", {}).get("rows"),
        "from": r.get("from"),
        "to": r.get("to"),
    }


def registry_of(fleet: Fleet, registry: Path | None) -> Path:
    """The registry folder: --registry, else PRECAST_MODEL__REGISTRY, else the bundled
    models of the spec's model name."""
    found = registry or os.environ.get("PRECAST_MODEL__REGISTRY") or None
    return Path(found) if found else DEFAULT_MODELS_DIR / fleet.spec.serving.model_name


def source_folder(registry: Path, version: str) -> Path:
    folder = registry / version
    if not (folder / "manifest.json").is_file():
        have = ", ".join(layout.versions(registry)) or "none"
        raise ConfigError(f"no version {version} in model registry {registry} (have: {have})")
    return folder


def target_folder(registry: Path, version: str, out: Path | None) -> Path:
    if layout.semver_key(version) is None:
        raise ConfigError(f"--version {version!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    folder = out or registry / version
    if (folder / "manifest.json").exists():
        raise ConfigError(f"{folder} already holds a model; pick another --version or --out")
    return folder


def pin_active(registry: Path, target: Path) -> str | None:
    """Before a candidate lands in `registry`: without ACTIVE its highest version serves, which
    the candidate may become; pin ACTIVE to what serves now. Returns the pinned version."""
    if target.parent.resolve() != registry.resolve() or layout.active_version(registry):
        return None
    serving = layout.wanted_version(registry)
    if serving is None:
        return None
    layout.write_active(registry, serving)
    return serving


def write(
    folder: Path,
    model: bytes,
    manifest: dict[str, Any],
    metrics: dict[str, Any],
    *,
    registry: Path | None = None,
) -> dict[str, Any]:
    """model.onnx, manifest.json (its sha256 filled in) and metrics.json into `folder`; into
    `registry`'s folder of versions only after ACTIVE is pinned there (`pin_active`)."""
    if registry is not None:
        pinned = pin_active(registry, folder)
        if pinned:
            print(
                f"ACTIVE pinned to {pinned} in {registry}: the candidate serves once promoted",
                file=sys.stderr,
            )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model)
    manifest = {**manifest, "sha256": hashlib.sha256(model).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return manifest


def lineage(source: Manifest, folder: Path) -> dict[str, Any]:
    """How a candidate names the version it came from (`teacher` or `source`)."""
    return {
        "name": source.name,
        "version": source.version,
        "sha256": source.sha256,
        "folder": str(folder),
        "algorithm": source.raw.get("training", {}).get("algorithm"),
    }


def base_manifest(source: Manifest, fleet: Fleet, version: str) -> dict[str, Any]:
    """The fields a candidate shares with its source: name, input, labels, binding, statistics
    (the same input as the source: the worker feeds both the same matrix)."""
    stats = source.raw.get("standardize")
    return {
        "name": source.name,
        "version": version,
        "input": source.input,
        "output": source.output,
        "output_kind": source.output_kind,
        "features": list(fleet.features.names),
        "labels": list(source.labels),
        "spec": binding(fleet),
        **({"standardize": stats} if stats else {}),
    }
