"""ONNX Runtime session for a model folder (model.onnx + manifest.json), validated at load."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from precast.errors import ConfigError
from workers.features import FEATURE_NAMES
from workers.precompute.sensitivity import Sensitivity, estimate

log = logging.getLogger("precast.workers.model.inference")

_GPU_PREFERENCE = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    input: str
    output: str
    features: tuple[str, ...]
    labels: tuple[str, ...]
    sha256: str | None
    raw: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read model manifest {path}: {exc}") from None
        missing = [
            k for k in ("name", "version", "input", "output", "features", "labels") if k not in raw
        ]
        if missing:
            raise ConfigError(f"model manifest {path} lacks {', '.join(missing)}")
        return cls(
            raw["name"],
            str(raw["version"]),
            raw["input"],
            raw["output"],
            tuple(raw["features"]),
            tuple(raw["labels"]),
            raw.get("sha256"),
            raw,
        )


def nvidia_gpu_present() -> bool:
    """onnxruntime-gpu lists its GPU providers even where no GPU or CUDA exists; the driver's
    proc file is the cheap test that a GPU is there at all."""
    return Path("/proc/driver/nvidia/version").exists()


def choose_providers(
    requested: str, available: list[str], device_id: int = 0, gpu_present: bool | None = None
) -> list[Any]:
    """Provider list for a session: "auto" prefers TensorRT, then CUDA, and always ends on CPU."""
    if requested == "auto":
        gpu = nvidia_gpu_present() if gpu_present is None else gpu_present
        names = [p for p in _GPU_PREFERENCE if p in available] if gpu else []
    elif requested in ("cpu", "CPUExecutionProvider"):
        names = []
    else:
        name = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}.get(
            requested, requested
        )
        if name not in available:
            raise ConfigError(
                f"ONNX Runtime provider {name} is not available here (available: {', '.join(available)})"
            )
        names = [name]
    out: list[Any] = [(n, {"device_id": device_id}) for n in names]
    out.append("CPUExecutionProvider")
    return out


class ModelSession:
    """One loaded model version. `predict` takes the (n, F) feature matrix of `build_features`."""

    def __init__(
        self,
        model_dir: Path,
        *,
        provider: str = "auto",
        device_id: int = 0,
        intra_op_threads: int = 1,
        allow_spinning: bool = False,
        warmup_rows: int = 64,
    ) -> None:
        model_dir = Path(model_dir)
        self.manifest = Manifest.load(model_dir / "manifest.json")
        model_path = model_dir / "model.onnx"
        try:
            model_bytes = model_path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read model {model_path}: {exc.strerror}") from None
        if self.manifest.sha256 and hashlib.sha256(model_bytes).hexdigest() != self.manifest.sha256:
            raise ConfigError(f"{model_path} does not match the sha256 in its manifest")
        if self.manifest.features != FEATURE_NAMES:
            raise ConfigError(
                f"model {self.version} expects features {list(self.manifest.features)}, "
                f"this worker builds {list(FEATURE_NAMES)}"
            )
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if allow_spinning else "0"
        )
        opts.log_severity_level = 3
        providers = choose_providers(provider, ort.get_available_providers(), device_id)
        try:
            self._sess = ort.InferenceSession(model_bytes, sess_options=opts, providers=providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors on bad models
            raise ConfigError(f"ONNX Runtime cannot load {model_path}: {exc}") from None
        self._validate_io()
        self._sensitivity: dict[int, Sensitivity] = {}
        self.providers = self._sess.get_providers()
        if warmup_rows:
            self.predict(np.zeros((warmup_rows, len(FEATURE_NAMES)), dtype=np.float32))
        log.info("model %s %s loaded on %s", self.manifest.name, self.version, self.providers[0])

    def _validate_io(self) -> None:
        m = self.manifest
        inputs = {i.name: i for i in self._sess.get_inputs()}
        outputs = {o.name: o for o in self._sess.get_outputs()}
        if m.input not in inputs or m.output not in outputs:
            raise ConfigError(
                f"model {m.version}: manifest names input {m.input!r} / output {m.output!r}, "
                f"the graph has {list(inputs)} / {list(outputs)}"
            )
        n_in = inputs[m.input].shape[-1]
        n_out = outputs[m.output].shape[-1]
        if isinstance(n_in, int) and n_in != len(m.features):
            raise ConfigError(
                f"model {m.version}: graph takes {n_in} features, manifest lists {len(m.features)}"
            )
        if isinstance(n_out, int) and n_out != len(m.labels):
            raise ConfigError(
                f"model {m.version}: graph gives {n_out} scores, manifest lists {len(m.labels)} labels"
            )

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def labels(self) -> tuple[str, ...]:
        return self.manifest.labels

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self._sess.run([self.manifest.output], {self.manifest.input: features})[0]

    def sensitivity_for(self, k: int) -> Sensitivity:
        """This version's decision-boundary sensitivities (workers.precompute.sensitivity), measured once
        on realistic inputs (the fleet's ground truth, fixed seed) and kept."""
        if k not in self._sensitivity:
            from workers.training.train import synthetic_dataset

            self._sensitivity[k] = estimate(self, synthetic_dataset(4_096, seed=20261130)[0], k)
        return self._sensitivity[k]
