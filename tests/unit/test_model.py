"""A model folder bound to its fleet spec: the feature matrix it is fed, the checks at load
(manifest vs graph, sha256, the spec binding in the manifest and in model.onnx), top-K."""

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper

from precast.errors import ConfigError
from precast.fleet import load_fleet
from workers.model.inference import ModelSession, choose_providers
from workers.model.manifest import META_FEATURES, META_SPEC_HASH
from workers.model.topk import top_k
from workers.settings import DEFAULT_MODEL_DIR

FLEET = load_fleet()
NAMES = FLEET.features.names


def _state(**over: float) -> np.ndarray:
    row = dict(zip(FLEET.features.state_names, FLEET.features.fill.tolist(), strict=True))
    row.update(over)
    return np.array([list(row.values())], dtype=np.float64)


def test_features_shape_one_hot_and_transforms():
    state = np.vstack([_state(device_type=1, uptime_s=3600.0), _state(device_type=-1)])
    ctx = FLEET.context.columns([None, None], np.zeros(2, dtype=np.int64))
    x = FLEET.features.build(state, ctx)
    assert x.shape == (2, len(NAMES)) and x.dtype == np.float32
    onehot = x[
        :, NAMES.index("device_type=gateway") : NAMES.index("device_type=pump_controller") + 1
    ]
    assert onehot.tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]  # unknown type -> all zero
    assert x[0, NAMES.index("log_uptime_h")] == pytest.approx(np.log1p(1.0))
    # no work order ever: the cap, through log1p
    assert x[1, NAMES.index("log_hours_since_last_wo")] == pytest.approx(np.log1p(2160.0))


def test_a_nulled_metric_takes_the_features_missing_value():
    x = FLEET.features.build(_state(cpu_pct=np.nan), FLEET.context.columns([None], np.zeros(1)))
    assert x[0, NAMES.index("cpu_pct")] == 30.0  # the spec's `missing` for cpu_pct


def test_top_k_orders_scores():
    p = np.array([[0.1, 0.5, 0.15, 0.25], [0.7, 0.1, 0.1, 0.1]], dtype=np.float32)
    idx, scores = top_k(p, 3)
    assert idx[0].tolist() == [1, 3, 2]
    assert idx[1, 0] == 0
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_committed_model_loads_and_predicts():
    m = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    probs = m.predict(np.zeros((5, len(NAMES)), dtype=np.float32))
    assert probs.shape == (5, len(m.labels))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert m.version == json.loads((DEFAULT_MODEL_DIR / "manifest.json").read_text())["version"]


def _copy(tmp_path, edit=None):
    shutil.copytree(DEFAULT_MODEL_DIR, tmp_path / "m")
    path = tmp_path / "m" / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit:
        edit(manifest)
    path.write_text(json.dumps(manifest))
    return tmp_path / "m"


def test_manifest_label_mismatch_is_a_clear_error(tmp_path):
    folder = _copy(tmp_path, lambda m: m.update(labels=m["labels"][:-1]))
    with pytest.raises(ConfigError, match="labels"):
        ModelSession(folder, provider="cpu")


def test_a_model_of_other_features_is_refused_naming_the_first_difference(tmp_path):
    def rename(m):
        m["features"][7] = "type_gateway"  # what the column was called before fleet specs

    folder = _copy(tmp_path, rename)
    with pytest.raises(
        ConfigError, match=r"feature 7 is 'type_gateway' in the model, 'device_type=gateway'"
    ):
        ModelSession(folder, provider="cpu")


def test_same_names_other_definitions_are_refused_by_hash(tmp_path):
    folder = _copy(tmp_path, lambda m: m["spec"].update(feature_hash="0" * 64))
    with pytest.raises(ConfigError, match="same feature names, different definitions"):
        ModelSession(folder, provider="cpu")


def test_an_unbound_manifest_is_refused(tmp_path):
    folder = _copy(tmp_path, lambda m: m.pop("spec"))
    with pytest.raises(ConfigError, match="bound to no fleet spec"):
        ModelSession(folder, provider="cpu")


def test_model_metadata_must_agree_with_the_manifest(tmp_path):
    folder = _copy(tmp_path)
    model = onnx.load(str(folder / "model.onnx"))
    props = {p.key: p.value for p in model.metadata_props}
    assert props[META_SPEC_HASH] == FLEET.features.hash and json.loads(
        props[META_FEATURES]
    ) == list(NAMES)
    props[META_SPEC_HASH] = "f" * 64
    del model.metadata_props[:]
    helper.set_model_props(model, props)
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("sha256")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="model.onnx is bound to features ffffffffffff"):
        ModelSession(folder, provider="cpu")


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


def test_shipped_model_beats_chance_on_simulated_rows():
    from precast.fleet.simulate.training import training_rows

    m = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    x, y = training_rows(FLEET, 5_000, seed=12345)
    acc = float((m.predict(x).argmax(axis=1) == y).mean())
    assert acc > 0.8, acc  # six classes: the majority class alone is ~0.55
