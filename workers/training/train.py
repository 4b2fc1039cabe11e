"""Train the service-strategy classifier on synthetic fleet data and export ONNX + manifest.

    python -m workers.training.train --version 1.0.0 --seed 7

Needs the `train` extra (scikit-learn, onnx). The network is an sklearn MLP; the ONNX graph is
written from its weights with standard ONNX ops only (Sub, Div, MatMul, Add, Relu, Softmax).
skl2onnx would emit `ai.onnx.ml` ops (Scaler, ZipMap, ArrayFeatureExtractor) that the CUDA and
TensorRT providers do not run, forcing CPU fallbacks and copies in the middle of the graph.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from schemas import fleet
from workers.drift.reference import build_reference, save_reference
from workers.features import FEATURE_NAMES, build_features

MODEL_NAME = "fleet-strategy"
INPUT_NAME = "features"
OUTPUT_NAME = "probabilities"
DEFAULT_MODELS_DIR = Path(__file__).parent / "models"


def synthetic_dataset(
    n: int, seed: int, label_noise: float = 0.03
) -> tuple[np.ndarray, np.ndarray]:
    """Labelled samples from the shared fleet ground truth, through the serving feature function."""
    rng = np.random.default_rng(seed)
    cond = fleet.sample_conditions(rng, n)
    cols: dict[str, Any] = fleet.sample_metrics(rng, cond)
    cols["firmware_is_latest"] = fleet.sample_firmware_is_latest(rng, cond).astype(np.float32)
    cols["device_type_idx"] = rng.integers(0, len(fleet.DEVICE_TYPES), n)
    cols.update(fleet.sample_context(rng, cond))
    x = build_features(cols)
    y = fleet.STRATEGY_OF_CONDITION[cond].copy()
    flip = rng.random(n) < label_noise  # field labels are never perfect
    y[flip] = rng.integers(0, len(fleet.STRATEGIES), int(flip.sum()))
    return x, y


def to_onnx(
    mean: np.ndarray,
    scale: np.ndarray,
    coefs: list[np.ndarray],
    intercepts: list[np.ndarray],
    opset: int = 17,
) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(mean.astype(np.float32), "mean"),
        numpy_helper.from_array(scale.astype(np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Sub", [INPUT_NAME, "mean"], ["centered"]),
        helper.make_node("Div", ["centered", "scale"], ["h0"]),
    ]
    last = "h0"
    for i, (w, b) in enumerate(zip(coefs, intercepts, strict=True)):
        inits += [
            numpy_helper.from_array(w.astype(np.float32), f"W{i}"),
            numpy_helper.from_array(b.astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [last, f"W{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"z{i}"]),
        ]
        last = f"z{i}"
        if i < len(coefs) - 1:
            nodes.append(helper.make_node("Relu", [last], [f"a{i}"]))
            last = f"a{i}"
    nodes.append(helper.make_node("Softmax", [last], [OUTPUT_NAME], axis=-1))
    n_out = coefs[-1].shape[1]
    graph = helper.make_graph(
        nodes,
        MODEL_NAME,
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", len(mean)])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", n_out])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="precast.workers.training.train",
    )
    model.ir_version = 8  # readable by every onnxruntime >= 1.14
    onnx.checker.check_model(model)
    return model.SerializeToString()


def holdout_metrics(probs: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    pred = probs.argmax(axis=1)
    top3 = np.argsort(-probs, axis=1)[:, :3]
    f1 = {}
    for i, label in enumerate(fleet.STRATEGIES):
        tp = int(((pred == i) & (y == i)).sum())
        fp = int(((pred == i) & (y != i)).sum())
        fn = int(((pred != i) & (y == i)).sum())
        f1[label] = round(2 * tp / max(1, 2 * tp + fp + fn), 4)
    return {
        "samples": len(y),
        "accuracy": round(float((pred == y).mean()), 4),
        "top3_accuracy": round(float((top3 == y[:, None]).any(axis=1).mean()), 4),
        "macro_f1": round(float(np.mean(list(f1.values()))), 4),
        "f1": f1,
    }


def train(
    version: str,
    seed: int,
    n_train: int,
    n_holdout: int,
    out_dir: Path,
    hidden: tuple[int, ...] = (32, 16),
) -> dict[str, Any]:
    from sklearn.neural_network import MLPClassifier

    x, y = synthetic_dataset(n_train, seed)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-6] = 1.0
    started = time.perf_counter()
    clf = MLPClassifier(
        hidden_layer_sizes=hidden,
        max_iter=60,
        random_state=seed,
        early_stopping=True,
        n_iter_no_change=5,
    )
    clf.fit((x - mean) / scale, y)
    if list(clf.classes_) != list(range(len(fleet.STRATEGIES))):
        raise RuntimeError("training data did not cover every strategy; raise --samples")
    model_bytes = to_onnx(mean, scale, clf.coefs_, clf.intercepts_)

    xh, yh = synthetic_dataset(n_holdout, seed + 1_000_003)
    import onnxruntime as ort

    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    probs = sess.run([OUTPUT_NAME], {INPUT_NAME: xh})[0]
    sk_probs = clf.predict_proba((xh - mean) / scale)
    if not np.allclose(probs, sk_probs, atol=1e-4):
        raise RuntimeError("exported ONNX graph disagrees with the trained model")

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "model.onnx").write_bytes(model_bytes)
    manifest = {
        "name": MODEL_NAME,
        "version": version,
        "input": INPUT_NAME,
        "output": OUTPUT_NAME,
        "features": list(FEATURE_NAMES),
        "labels": list(fleet.STRATEGIES),
        "sha256": hashlib.sha256(model_bytes).hexdigest(),
        "training": {
            "seed": seed,
            "samples": n_train,
            "hidden_layers": list(hidden),
            "iterations": int(clf.n_iter_),
            "seconds": round(time.perf_counter() - started, 1),
            "data": "schemas.fleet synthetic ground truth, 3% label noise",
        },
        "holdout": holdout_metrics(probs, yh),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    save_reference(build_reference(x, version), out_dir)  # what the drift monitor compares with
    return manifest


def write_reference(model_dir: Path) -> Path:
    """Rebuild a model's drift reference from the training data its manifest names (the
    synthetic dataset is a pure function of seed and size)."""
    manifest = json.loads((model_dir / "manifest.json").read_text())
    t = manifest["training"]
    x, _ = synthetic_dataset(t["samples"], t["seed"])
    return save_reference(build_reference(x, manifest["version"]), model_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m workers.training.train", description=__doc__.splitlines()[0]
    )
    p.add_argument("--version", default="1.0.0")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--samples", type=int, default=120_000)
    p.add_argument("--holdout", type=int, default=30_000)
    p.add_argument(
        "--out", type=Path, default=None, help="default: workers/models/<name>/<version>"
    )
    p.add_argument(
        "--reference-only",
        action="store_true",
        help="only (re)write drift-reference.npz of an existing model from its manifest",
    )
    args = p.parse_args(argv)
    out = args.out or DEFAULT_MODELS_DIR / MODEL_NAME / args.version
    if args.reference_only:
        print(f"drift reference -> {write_reference(out)}")
        return 0
    try:
        import onnx  # noqa: F401
        import sklearn  # noqa: F401
    except ImportError as exc:
        print(
            f"train: missing {exc.name}; install the extra: pip install -e '.[train]'",
            file=sys.stderr,
        )
        return 2
    m = train(args.version, args.seed, args.samples, args.holdout, out)
    h = m["holdout"]
    print(
        f"{MODEL_NAME} {args.version} -> {out}: accuracy {h['accuracy']}, top-3 {h['top3_accuracy']}, "
        f"macro F1 {h['macro_f1']} on {h['samples']} holdout samples"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
