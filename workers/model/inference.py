"""ONNX Runtime session for a model folder (model.onnx + manifest.json), validated at load:
bound to the fleet spec (workers.model.manifest), inputs and outputs as the manifest says."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from workers.model.manifest import Manifest
from workers.model.sensitivity import Sensitivity, estimate
from workers.model.serving_metrics import MODEL_INFERENCE, MODEL_MEMORY

log = logging.getLogger("precast.workers.model.inference")

_GPU_PREFERENCE = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


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


def resident_bytes() -> int:
    """This process's resident set (Linux /proc; 0 elsewhere, which disables the budget)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


PROBE_FILE = "probe.npy"  # realistic feature rows shipped with a model (sensitivities)
PROBE_ROWS = 4_096


class ModelSession:
    """One loaded model version, bound to a fleet spec. `predict` takes the (n, F) feature
    matrix of the spec's `FeatureModel.build` and returns class probabilities in `labels`
    order, whatever the converter made of the output (a probability tensor, logits, or
    skl2onnx's ZipMap sequence of maps)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        fleet: Fleet | None = None,
        provider: str = "auto",
        device_id: int = 0,
        intra_op_threads: int = 1,
        allow_spinning: bool = False,
        warmup_rows: int = 64,
        memory_budget_mb: int | None = None,
    ) -> None:
        model_dir = Path(model_dir)
        self.folder = model_dir
        self.fleet = fleet or load_fleet()
        self.manifest = Manifest.load(model_dir / "manifest.json")
        self.manifest.check_binding(self.fleet)
        model_path = model_dir / "model.onnx"
        try:
            model_bytes = model_path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read model {model_path}: {exc.strerror}") from None
        if self.manifest.sha256 and hashlib.sha256(model_bytes).hexdigest() != self.manifest.sha256:
            raise ConfigError(f"{model_path} does not match the sha256 in its manifest")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if allow_spinning else "0"
        )
        opts.log_severity_level = 3
        providers = choose_providers(provider, ort.get_available_providers(), device_id)
        rss_before = resident_bytes()
        self._infer_s: Any = None
        try:
            self._sess = ort.InferenceSession(model_bytes, sess_options=opts, providers=providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors on bad models
            raise ConfigError(f"ONNX Runtime cannot load {model_path}: {exc}") from None
        self.manifest.check_metadata(dict(self._sess.get_modelmeta().custom_metadata_map))
        self._validate_io()
        self._sensitivity: dict[int, Sensitivity] = {}
        self.providers = self._sess.get_providers()
        self.standardization = self.manifest.standardization or None
        if warmup_rows:
            self.predict(np.zeros((warmup_rows, len(self.manifest.features)), dtype=np.float32))
        self.memory_bytes = max(0, resident_bytes() - rss_before)
        if memory_budget_mb is not None and self.memory_bytes > memory_budget_mb * 2**20:
            raise ConfigError(
                f"{self.manifest.who()}: its session took {self.memory_bytes / 2**20:.0f} MB at "
                f"load, over PRECAST_WORKER__MODEL_MEMORY_MB={memory_budget_mb}: give the worker "
                "more memory or serve a smaller model (precast distill, precast quantize)"
            )
        MODEL_MEMORY.labels(self.version).set(self.memory_bytes)
        self._infer_s = MODEL_INFERENCE.labels(self.version)
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
        self._input_type = np.float64 if inputs[m.input].type == "tensor(double)" else np.float32
        out = outputs[m.output]
        self._zipmap = out.type.startswith("seq(map(")
        n_in = inputs[m.input].shape[-1] if inputs[m.input].shape else None
        if isinstance(n_in, int) and n_in != len(m.features):
            raise ConfigError(
                f"model {m.version}: graph takes {n_in} features, manifest lists {len(m.features)}"
            )
        if self._zipmap:
            if m.output_kind != "probabilities":
                raise ConfigError(
                    f"model {m.version}: a ZipMap output is probabilities, not {m.output_kind}"
                )
            return
        if not out.type.startswith("tensor("):
            raise ConfigError(f"model {m.version}: output {m.output!r} is {out.type}, not a tensor")
        n_out = out.shape[-1] if out.shape else None
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
        m = self.manifest
        x = features if features.dtype == self._input_type else features.astype(self._input_type)
        t0 = time.perf_counter()
        out = self._sess.run([m.output], {m.input: x})[0]
        if self._infer_s is not None:  # not during the warm-up: it would skew the tail
            self._infer_s.observe(time.perf_counter() - t0)
        if self._zipmap:
            return zipmap_to_array(out, m.labels)
        scores = np.asarray(out, dtype=np.float32)
        if m.output_kind == "logits":
            z = scores - scores.max(axis=1, keepdims=True)
            e = np.exp(z)
            scores = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        return scores

    def probe_sample(self) -> np.ndarray:
        """Realistic feature rows for measuring sensitivities: the model's own (`probe.npy`,
        rows of its training set), else rows simulated from the spec."""
        path = self.folder / PROBE_FILE
        if path.exists():
            sample = np.load(path, allow_pickle=False)
            if sample.ndim == 2 and sample.shape[1] == len(self.manifest.features):
                return np.asarray(sample, dtype=np.float32)
            log.warning(
                "%s has shape %s, not (n, %d): simulating instead",
                path,
                sample.shape,
                len(self.manifest.features),
            )
        from precast.fleet.simulate.training import training_rows

        x, _ = training_rows(self.fleet, PROBE_ROWS, seed=20261130)
        return x

    def sensitivity_for(self, k: int) -> Sensitivity:
        """This version's decision-boundary sensitivities (workers.model.sensitivity),
        measured once on realistic inputs (`probe_sample`) and kept."""
        if k not in self._sensitivity:
            self._sensitivity[k] = estimate(
                self, self.probe_sample(), self.fleet.features.change_scale, k
            )
        return self._sensitivity[k]


def zipmap_to_array(rows: list[dict[Any, float]], labels: tuple[str, ...]) -> np.ndarray:
    """skl2onnx's ZipMap output (a list of {class: probability}) as an (n, C) array in label
    order; classes are label names, or indexes into the labels."""
    if not rows:
        return np.zeros((0, len(labels)), dtype=np.float32)
    keys = list(rows[0])
    order = keys if isinstance(keys[0], str) else [labels[int(k)] for k in keys]
    col = {lab: i for i, lab in enumerate(labels)}
    idx = [col[lab] for lab in order]
    out = np.zeros((len(rows), len(labels)), dtype=np.float32)
    out[:, idx] = np.array([list(r.values()) for r in rows], dtype=np.float32)
    return out
