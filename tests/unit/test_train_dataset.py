"""`precast train --dataset DIR`: a model from resolved work orders, bound to the spec the
dataset was built for, with a time-based holdout and its metrics beside it in the registry;
a dataset of another spec, or an unfinished one, is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from opsctl.dataset.parts import write_part
from precast.fleet import load_fleet
from tests.outcome_support import build, simulate
from workers.model.inference import ModelSession
from workers.training.train import main

TRAILERS = "schemas/fleets/trailers.toml"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A dataset folder as `precast dataset build` writes it, from simulated trailers."""
    fleet = load_fleet(TRAILERS)
    folder = tmp_path_factory.mktemp("ds")
    s = simulate(fleet, devices=150, rounds=40, seed=6)
    rows = build(s)
    cols = rows.rows()
    n = write_part(folder, 0, cols, fleet.features.names, row_group=100)
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "format": 1,
                "fingerprint": "f" * 64,
                "fleet": {
                    "name": fleet.name,
                    "version": fleet.spec.fleet.version,
                    "feature_hash": fleet.features.hash,
                },
                "features": list(fleet.features.names),
                "labels": list(fleet.spec.labels),
                "range": {"from": "2023-11-14T22:13:20Z", "to": "2023-11-14T22:20:00Z"},
                "counts": {"rows": n},
                "folder": str(folder),
            }
        )
    )
    return folder, cols


def test_a_model_from_a_dataset_goes_into_the_registry_with_its_metrics(dataset, tmp_path, capsys):
    folder, cols = dataset
    reg = tmp_path / "registry"
    rc = main(
        ["--version", "2.0.0", "--dataset", str(folder), "--spec", TRAILERS, "--registry", str(reg)]
    )
    assert rc == 0, capsys.readouterr().err
    out = reg / "2.0.0"
    m = json.loads((out / "manifest.json").read_text())
    fleet = load_fleet(TRAILERS)
    assert m["spec"]["feature_hash"] == fleet.features.hash and m["version"] == "2.0.0"
    assert m["training"]["dataset"]["fingerprint"] == "f" * 64
    assert m["training"]["samples"] == int(len(cols["label"]) * 0.8)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["holdout"].startswith("time-based")
    assert set(metrics["f1"]) == set(fleet.spec.labels)
    assert {"accuracy", "top3_accuracy", "macro_f1"} <= set(metrics)
    assert 0 <= metrics["calibration"]["ece"] <= 1 and metrics["calibration"]["bins"]
    # the newest 20 % were held out: the holdout's rows are the latest opens
    cut = sorted(cols["time_ms"])[int(len(cols["time_ms"]) * 0.8)]
    assert metrics["samples"] == sum(t >= cut for t in cols["time_ms"])
    s = ModelSession(out, fleet=fleet, provider="cpu")  # binding, sha256, graph all check out
    x = np.stack([np.asarray(cols[n], dtype=np.float32) for n in fleet.features.names], axis=1)
    assert s.predict(fleet.features.standardize(x, s.standardization)).shape == (len(x), 6)
    # it learnt something: better than always answering the most common label
    common = max(set(cols["label"]), key=cols["label"].count)
    assert metrics["accuracy"] > cols["label"].count(common) / len(cols["label"])


def test_lightgbm_is_an_option(dataset, tmp_path):
    folder, _ = dataset
    rc = main(
        [
            "--version",
            "2.1.0",
            "--dataset",
            str(folder),
            "--spec",
            TRAILERS,
            "--algorithm",
            "lightgbm",
            "--out",
            str(tmp_path / "m"),
        ]
    )
    assert rc == 0
    assert (
        json.loads((tmp_path / "m" / "manifest.json").read_text())["training"]["algorithm"]
        == "lightgbm"
    )


def test_a_dataset_of_another_spec_or_an_unfinished_one_is_refused(dataset, tmp_path, capsys):
    folder, _ = dataset
    rc = main(["--version", "2.2.0", "--dataset", str(folder), "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert rc == 2 and "was built for fleet spec 'trailers'" in err and len(err.splitlines()) == 1
    unfinished = tmp_path / "half"
    unfinished.mkdir()
    (unfinished / "_checkpoint.json").write_text("{}")
    rc = main(["--version", "2.2.0", "--dataset", str(unfinished), "--spec", TRAILERS])
    assert rc == 2 and "unfinished build" in capsys.readouterr().err
    rc = main(["--version", "2.2.0", "--dataset", str(tmp_path / "none"), "--spec", TRAILERS])
    assert rc == 2 and "no dataset folder" in capsys.readouterr().err
