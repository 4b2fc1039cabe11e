"""`precast quantize`: an MLP quantized dynamically (INT8), statically (INT8, calibrated on
rows) or to fp16 loads in the worker's session and agrees with its source; the candidate's
manifest names its source and the method, and it does not serve before it is promoted; a tree
ensemble is refused in one line, with nothing written."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from precast.fleet import load_fleet
from precast.fleet.simulate.training import training_rows
from workers.model.inference import ModelSession
from workers.model.manifest import Manifest
from workers.training import candidate, quantize
from workers.training.slim_report import agreement

SOURCE = "workers/models/fleet-strategy/1.0.0"  # the built-in fleet's MLP (standard operators)
TRAILERS = "schemas/fleets/trailers.toml"
TREES = "workers/models/reefer-service/1.0.0"
# Measured top-1 agreement with the source on 4,000 fresh simulated rows: dynamic 0.9968,
# static 0.9973, fp16 0.9998; the thresholds leave a margin below that.
MIN_AGREEMENT = {"dynamic": 0.985, "static": 0.985, "fp16": 0.995}
QUANTIZED_OPS = {"dynamic": "MatMulInteger", "static": "QuantizeLinear", "fp16": "Cast"}


@pytest.fixture(scope="module")
def fleet():
    return load_fleet()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    reg = tmp_path_factory.mktemp("registry")
    shutil.copytree(SOURCE, reg / "1.0.0")
    return reg


@pytest.mark.parametrize(
    ("method", "version"), [("dynamic", "1.0.1"), ("static", "1.0.2"), ("fp16", "1.0.3")]
)
def test_a_quantized_mlp_loads_and_agrees_with_its_source(fleet, registry, method, version):
    rows = candidate.rows_from(fleet, probe_of=registry / "1.0.0")  # its training rows
    manifest, report = quantize.quantize(
        fleet,
        registry / "1.0.0",
        version,
        registry / version,
        method,
        rows,
        calls={1: 50, 256: 10},
        rss=False,
        registry=registry,
    )
    source = ModelSession(registry / "1.0.0", fleet=fleet, provider="cpu")
    slim = ModelSession(registry / version, fleet=fleet, provider="cpu")  # the worker's loader
    x, _ = training_rows(fleet, 4_000, seed=99)
    fresh = agreement(source.predict(x), slim.predict(x))
    assert fresh["top1_agreement"] >= MIN_AGREEMENT[method], fresh
    assert report["top1_agreement"] >= MIN_AGREEMENT[method], report
    graph = onnx.load(str(registry / version / "model.onnx")).graph
    assert QUANTIZED_OPS[method] in {n.op_type for n in graph.node}
    # the source's input, and what the worker needs beside the graph
    assert manifest["features"] == list(fleet.features.names)
    assert (registry / version / "probe.npy").exists()
    assert (registry / version / "drift-reference.npz").exists()
    Manifest.load(registry / version / "manifest.json").check_binding(fleet)
    # it names its source and the method, in the manifest and in metrics.json
    on_disk = json.loads((registry / version / "manifest.json").read_text())
    src = json.loads((registry / "1.0.0" / "manifest.json").read_text())
    assert on_disk == manifest and on_disk["method"] == f"quantize-{method}"
    assert on_disk["source"]["version"] == "1.0.0" and on_disk["source"]["sha256"] == src["sha256"]
    metrics = json.loads((registry / version / "metrics.json").read_text())
    assert metrics["models"]["slim"]["version"] == version
    assert metrics["models"]["reference"]["version"] == "1.0.0"
    assert (registry / "ACTIVE").read_text().strip() == "1.0.0"  # pinned: not served yet


def test_a_tree_ensemble_is_refused_in_one_line(tmp_path, capsys):
    reg = tmp_path / "registry"
    shutil.copytree(TREES, reg / "1.0.0")
    rc = quantize.main(["1.0.0", "--version", "1.0.1", "--spec", TRAILERS, "--registry", str(reg)])
    err = capsys.readouterr().err
    assert rc != 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "TreeEnsembleClassifier" in lines[0] and "precast distill" in lines[0]
    assert sorted(p.name for p in reg.iterdir()) == ["1.0.0"]  # no candidate, no ACTIVE


def test_a_static_quantization_without_rows_calibrates_on_the_probe(fleet, tmp_path, capsys):
    reg = tmp_path / "registry"
    shutil.copytree(SOURCE, reg / "1.0.0")
    (reg / "1.0.0" / "probe.npy").unlink()
    rc = quantize.main(
        ["1.0.0", "--version", "1.0.1", "--method", "static", "--registry", str(reg)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "has no probe.npy" in err and len(err.strip().splitlines()) == 1, err
    np.save(reg / "1.0.0" / "probe.npy", training_rows(fleet, 512, seed=4)[0])
    rc = quantize.main(
        ["1.0.0", "--version", "1.0.1", "--method", "static", "--registry", str(reg)]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "quantize-static of 1.0.0" in out.out and "agreement with 1.0.0" in out.out


def test_other_ai_onnx_ml_graphs_are_refused_by_name():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from workers.training import export

    x, y = training_rows(load_fleet(), 600, seed=2)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1_000)).fit(x, y)
    model, _ = export.sklearn_to_onnx(clf, x.shape[1])  # precast train --algorithm logreg
    why = quantize.refusal(model, "model m 1.0.0")
    assert why is not None and "LinearClassifier" in why and "precast distill" in why
