import json
import shutil

import numpy as np
import pytest

from precast.errors import ConfigError
from workers.features import EMPTY_CONTEXT, FEATURE_NAMES, build_features
from workers.model.inference import ModelSession, choose_providers
from workers.model.topk import top_k
from workers.settings import DEFAULT_MODEL_DIR


def test_features_shape_and_one_hot():
    cols = {
        "cpu_pct": np.array([10.0, 90.0]),
        "mem_pct": np.array([20.0, 80.0]),
        "temperature_c": np.array([40.0, 70.0]),
        "error_rate": np.array([0.0, 0.2]),
        "signal_quality": np.array([0.9, 0.5]),
        "uptime_s": np.array([3600.0, 0.0]),
        "firmware_is_latest": np.array([1.0, 0.0]),
        "device_type_idx": np.array([1, -1]),
    }
    cols.update({k: np.full(2, v) for k, v in EMPTY_CONTEXT.items()})
    x = build_features(cols)
    assert x.shape == (2, len(FEATURE_NAMES)) and x.dtype == np.float32
    onehot = x[
        :, FEATURE_NAMES.index("type_gateway") : FEATURE_NAMES.index("type_pump_controller") + 1
    ]
    assert onehot.tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]  # unknown type -> all zero
    assert x[0, FEATURE_NAMES.index("log_uptime_h")] == pytest.approx(np.log1p(1.0))


def test_top_k_orders_scores():
    p = np.array([[0.1, 0.5, 0.15, 0.25], [0.7, 0.1, 0.1, 0.1]], dtype=np.float32)
    idx, scores = top_k(p, 3)
    assert idx[0].tolist() == [1, 3, 2]
    assert idx[1, 0] == 0
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_committed_model_loads_and_predicts():
    m = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    probs = m.predict(np.zeros((5, len(FEATURE_NAMES)), dtype=np.float32))
    assert probs.shape == (5, len(m.labels))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert m.version == json.loads((DEFAULT_MODEL_DIR / "manifest.json").read_text())["version"]


def test_manifest_mismatch_is_a_clear_error(tmp_path):
    shutil.copytree(DEFAULT_MODEL_DIR, tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    manifest["labels"] = manifest["labels"][:-1]
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="labels"):
        ModelSession(tmp_path / "m", provider="cpu")


def test_tampered_model_is_refused(tmp_path):
    shutil.copytree(DEFAULT_MODEL_DIR, tmp_path / "m")
    with open(tmp_path / "m" / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ConfigError, match="sha256"):
        ModelSession(tmp_path / "m", provider="cpu")


def test_provider_choice():
    avail = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers("auto", avail, gpu_present=False) == ["CPUExecutionProvider"]
    assert choose_providers("auto", avail, 1, gpu_present=True)[0] == (
        "TensorrtExecutionProvider",
        {"device_id": 1},
    )
    with pytest.raises(ConfigError, match="not available"):
        choose_providers("cuda", ["CPUExecutionProvider"])


def test_trained_model_beats_chance_on_fresh_data():
    from workers.training.train import synthetic_dataset

    m = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    x, y = synthetic_dataset(5000, seed=12345)
    acc = float((m.predict(x).argmax(axis=1) == y).mean())
    assert acc > 0.85, acc  # six classes: chance is ~0.55 (majority class)
