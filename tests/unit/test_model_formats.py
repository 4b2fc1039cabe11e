"""Models from the standard converters serve on CPU, bound to the spec: skl2onnx (with and
without ZipMap, `ai.onnx.ml` operators), onnxmltools for LightGBM and XGBoost, and a logits graph
in the shape `torch.onnx.export` writes (input `input`, one float output of raw scores)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from precast.fleet import load_fleet
from workers.model.inference import ModelSession
from workers.model.manifest import binding
from workers.training import export

pytest.importorskip("skl2onnx")
FLEET = load_fleet()
LABELS = FLEET.spec.labels


@pytest.fixture(scope="module")
def rows():
    from precast.fleet.simulate.training import training_rows

    return training_rows(FLEET, 3_000, seed=21)


def _folder(tmp_path, model, output, *, input_name="features", kind="probabilities"):
    raw = export.stamp(model, FLEET, LABELS, kind)
    (tmp_path / "model.onnx").write_bytes(raw)
    manifest = {
        "name": "t",
        "version": "0.0.1",
        "input": input_name,
        "output": output,
        "output_kind": kind,
        "features": list(FLEET.features.names),
        "labels": list(LABELS),
        "spec": binding(FLEET),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return ModelSession(tmp_path, fleet=FLEET, provider="cpu")


@pytest.mark.parametrize("zipmap", [False, True])
def test_skl2onnx_random_forest(tmp_path, rows, zipmap):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.ensemble import RandomForestClassifier

    x, y = rows
    clf = RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(x, y)
    model = to_onnx(
        clf,
        initial_types=[("features", FloatTensorType([None, x.shape[1]]))],
        options={id(clf): {"zipmap": zipmap}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    out = next(o.name for o in model.graph.output if "prob" in o.name)
    m = _folder(tmp_path, model, out)
    assert m._zipmap is zipmap
    got = m.predict(x[:200])
    want = clf.predict_proba(x[:200])
    assert got.shape == (200, len(LABELS))
    assert (got.argmax(axis=1) == want.argmax(axis=1)).mean() > 0.99
    np.testing.assert_allclose(got, want, atol=1e-2)


def test_lightgbm_through_onnxmltools(tmp_path, rows):
    lgb = pytest.importorskip("lightgbm")
    x, y = rows
    clf = lgb.LGBMClassifier(n_estimators=20, verbose=-1, n_jobs=1).fit(x, y)
    model, out = export.lightgbm_to_onnx(clf, x.shape[1])
    got = _folder(tmp_path, model, out).predict(x[:300])
    assert (got.argmax(axis=1) == clf.predict_proba(x[:300]).argmax(axis=1)).mean() > 0.99


def test_xgboost_through_onnxmltools(tmp_path, rows):
    xgb = pytest.importorskip("xgboost")
    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = rows
    clf = xgb.XGBClassifier(n_estimators=20, max_depth=4, n_jobs=1).fit(x, y)
    model = convert_xgboost(
        clf, initial_types=[("features", FloatTensorType([None, x.shape[1]]))], target_opset=15
    )
    out = next(o.name for o in model.graph.output if "prob" in o.name)
    got = _folder(tmp_path, model, out).predict(x[:300])
    assert (got.argmax(axis=1) == clf.predict_proba(x[:300]).argmax(axis=1)).mean() > 0.99


def test_logits_graph_like_torch_onnx_export(tmp_path, rows):
    """torch.onnx.export of an nn.Linear classifier writes Gemm(input, W, b) -> logits; the
    manifest says `output_kind: logits` and the session applies the softmax."""
    from onnx import TensorProto, helper, numpy_helper

    x, _ = rows
    rng = np.random.default_rng(0)
    w = rng.normal(size=(len(LABELS), x.shape[1])).astype(np.float32) * 0.1
    b = rng.normal(size=len(LABELS)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["input", "weight", "bias"], ["output"], transB=1)],
        "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch_size", x.shape[1]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch_size", len(LABELS)])],
        [numpy_helper.from_array(w, "weight"), numpy_helper.from_array(b, "bias")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch"
    )
    model.ir_version = 8
    m = _folder(tmp_path, model, "output", input_name="input", kind="logits")
    got = m.predict(x[:50])
    z = x[:50] @ w.T + b
    want = np.exp(z - z.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
