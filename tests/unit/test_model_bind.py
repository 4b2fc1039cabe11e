"""`precast model bind`: a model trained elsewhere is bound only when the worker would load it.
Everything the worker checks is checked at bind time, with one line, and a refused folder is left
as it was (issue 38)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from precast.errors import ConfigError
from precast.fleet import load_fleet
from workers.model.inference import ModelSession
from workers.training.bind import bind, main

pytest.importorskip("skl2onnx")
FLEET = load_fleet()


@pytest.fixture(scope="module")
def onnx_bytes() -> bytes:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.tree import DecisionTreeClassifier

    from precast.fleet.simulate.training import training_rows

    x, y = training_rows(FLEET, 2_000, seed=5)
    clf = DecisionTreeClassifier(max_depth=5, random_state=0).fit(x, y)
    model = to_onnx(
        clf,
        initial_types=[("features", FloatTensorType([None, x.shape[1]]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    return model.SerializeToString()


def _folder(tmp_path: Path, data: bytes, **changes) -> Path:
    manifest = {
        "name": "foreign",
        "version": "2.0.0",
        "input": "features",
        "output": "probabilities",
        "output_kind": "probabilities",
        "features": list(FLEET.features.names),
        "labels": list(FLEET.spec.labels),
    } | changes
    (tmp_path / "model.onnx").write_bytes(data)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_a_checked_model_binds_and_then_loads_in_the_worker(tmp_path, onnx_bytes):
    folder = _folder(tmp_path, onnx_bytes)
    raw = bind(folder, None)
    assert raw["spec"]["feature_hash"] == FLEET.features.hash
    session = ModelSession(folder, fleet=FLEET, provider="cpu")
    p = session.predict(np.zeros((3, FLEET.features.width), dtype=np.float32))
    assert p.shape == (3, len(FLEET.spec.labels))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"input": "x"}, "manifest names input 'x'"),
        ({"output": "label_probs"}, "output 'label_probs'"),
        ({"version": "v2"}, "not a semantic version"),
        ({"version": "2.0"}, "not a semantic version"),
        ({"labels": [*list(FLEET.spec.labels)[:-1], "teleport"]}, "label"),
        ({"features": list(FLEET.features.names)[1:]}, "feature"),
        ({"output_kind": "logits", "output": "label"}, "could not run it"),
    ],
)
def test_what_the_worker_would_refuse_is_refused_and_nothing_is_written(
    tmp_path, onnx_bytes, changes, message
):
    folder = _folder(tmp_path, onnx_bytes, **changes)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ConfigError, match=message):
        bind(folder, None)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_graph_of_another_width_is_refused(tmp_path):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.tree import DecisionTreeClassifier

    x = np.random.default_rng(0).normal(size=(200, 5)).astype(np.float32)
    y = np.arange(200) % len(FLEET.spec.labels)
    clf = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)
    model = to_onnx(
        clf,
        initial_types=[("features", FloatTensorType([None, 5]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    folder = _folder(tmp_path, model.SerializeToString())
    with pytest.raises(ConfigError, match="graph takes 5 features"):
        bind(folder, None)


def test_the_command_says_it_in_one_line(tmp_path, onnx_bytes, capsys):
    folder = _folder(tmp_path, onnx_bytes, input="x")
    assert main([str(folder)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("model bind: ") and "input 'x'" in err[0]
