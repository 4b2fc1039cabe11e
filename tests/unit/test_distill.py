"""`precast distill`: a student MLP trained on a registry version's soft labels agrees with its
teacher, is written with standard ONNX operators into the registry as a candidate whose
manifest names its teacher and the method, loads in the worker's session unchanged, and does not
serve before it is promoted (ACTIVE pinned); from a dataset it reports accuracy on the resolved
work orders. Bad command lines end in one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from precast.fleet import load_fleet
from precast.fleet.simulate.training import training_rows
from precast.models.layout import wanted_version
from workers.model.inference import ModelSession
from workers.model.manifest import Manifest
from workers.model.registry import ModelRegistry
from workers.training import candidate, distill
from workers.training.bind import bind
from workers.training.slim_report import agreement

TRAILERS = "schemas/fleets/trailers.toml"
TEACHER = "workers/models/reefer-service/1.0.0"  # LightGBM: the slow model of issue 38
# Measured on 6,000 simulated rows, seeds 7-9: 0.9895-0.992 top-1 agreement on 4,000 fresh
# rows (another simulation); the threshold leaves a margin below that.
MIN_AGREEMENT = 0.975


@pytest.fixture(scope="module")
def trailers():
    return load_fleet(TRAILERS)


@pytest.fixture(scope="module")
def student(trailers, tmp_path_factory):
    reg = tmp_path_factory.mktemp("registry")
    shutil.copytree(TEACHER, reg / "1.0.0")
    rows = candidate.rows_from(trailers, simulate=6_000, seed=8)
    manifest, report = distill.distill(
        trailers,
        reg / "1.0.0",
        rows,
        "1.2.0",
        reg / "1.2.0",
        seed=8,
        calls={1: 50, 256: 10},
        rss=False,
        registry=reg,
    )
    return reg, manifest, report


def test_the_student_agrees_with_its_teacher_on_rows_it_never_saw(trailers, student):
    reg, _, report = student
    x, _ = training_rows(trailers, 4_000, seed=99)  # another simulation than the student's
    teacher = ModelSession(reg / "1.0.0", fleet=trailers, provider="cpu")
    pupil = ModelSession(reg / "1.2.0", fleet=trailers, provider="cpu")
    xs = trailers.features.standardize(x, teacher.standardization)
    fresh = agreement(teacher.predict(xs), pupil.predict(xs))
    assert fresh["top1_agreement"] >= MIN_AGREEMENT, fresh
    assert report["top1_agreement"] >= MIN_AGREEMENT, report
    assert report["accuracy"]["slim"]["top1"] > 0.9  # the simulator's truth: labelled rows
    assert set(report["models"]) == {"reference", "slim"}
    for m in report["models"].values():
        assert set(m["speed"]) == {"1", "256"}
        assert m["speed"]["256"]["p999_us"] >= m["speed"]["256"]["p99_us"] > 0


def test_the_candidate_names_its_teacher_and_the_method(trailers, student):
    reg, manifest, report = student
    teacher = Manifest.load(reg / "1.0.0" / "manifest.json")
    on_disk = json.loads((reg / "1.2.0" / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest["method"] == "distill"
    assert manifest["teacher"]["version"] == "1.0.0"
    assert manifest["teacher"]["sha256"] == teacher.sha256
    assert manifest["teacher"]["algorithm"] == "lightgbm"
    assert manifest["standardize"] == teacher.raw["standardize"]  # the teacher's input
    assert manifest["slim"]["top1_agreement"] == report["top1_agreement"]
    metrics = json.loads((reg / "1.2.0" / "metrics.json").read_text())
    assert metrics["method"] == "distill" and metrics["rows"] == report["rows"]
    graph = onnx.load(str(reg / "1.2.0" / "model.onnx")).graph
    assert {n.domain for n in graph.node} <= {""}  # standard operators only (GPU providers)
    assert {n.op_type for n in graph.node} <= {"Sub", "Div", "MatMul", "Add", "Relu", "Softmax"}


def test_the_worker_loads_it_and_it_serves_only_once_promoted(trailers, student, tmp_path):
    reg, manifest, _ = student
    Manifest.load(reg / "1.2.0" / "manifest.json").check_binding(trailers)
    shutil.copytree(reg / "1.2.0", tmp_path / "copy")
    rebound = bind(tmp_path / "copy", TRAILERS)  # `precast model bind`'s checks pass, lineage kept
    assert rebound["teacher"] == manifest["teacher"] and rebound["method"] == "distill"
    session = ModelSession(reg / "1.2.0", fleet=trailers, provider="cpu")
    probs = session.predict(np.load(reg / "1.2.0" / "probe.npy")[:64])
    assert probs.shape == (64, len(trailers.spec.labels))
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    # without ACTIVE the highest version would serve: the student; ACTIVE was pinned instead
    assert (reg / "ACTIVE").read_text().strip() == "1.0.0" == wanted_version(reg)
    served = ModelRegistry(
        lambda path: ModelSession(path, fleet=trailers, provider="cpu"), registry=reg
    )
    try:
        assert served.current.version == "1.0.0"
    finally:
        served.close()


def test_a_dataset_gives_accuracy_on_resolved_outcomes(trailers, tmp_path):
    from opsctl.dataset.parts import write_part  # how `precast dataset build` writes a part
    from tests.outcome_support import build, simulate

    folder = tmp_path / "ds"
    folder.mkdir()
    cols = build(simulate(trailers, devices=150, rounds=40, seed=6)).rows()
    n = write_part(folder, 0, cols, trailers.features.names, row_group=100)
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "format": 1,
                "fingerprint": "d" * 64,
                "fleet": {
                    "name": trailers.name,
                    "version": trailers.spec.fleet.version,
                    "feature_hash": trailers.features.hash,
                },
                "features": list(trailers.features.names),
                "labels": list(trailers.spec.labels),
                "range": {"from": "2023-11-14T22:13:20Z", "to": "2023-11-14T22:20:00Z"},
                "counts": {"rows": n},
            }
        )
    )
    reg = tmp_path / "registry"
    shutil.copytree(TEACHER, reg / "1.0.0")
    rows = candidate.rows_from(trailers, dataset=folder)
    assert rows.y is not None and len(rows.y) == n
    manifest, report = distill.distill(
        trailers, reg / "1.0.0", rows, "1.2.0", reg / "1.2.0", calls={1: 20, 256: 5}, rss=False
    )
    assert manifest["training"]["dataset"]["fingerprint"] == "d" * 64
    assert "accuracy" in report  # against the work orders' resolutions
    assert 0 <= report["accuracy"]["reference"]["top1"] <= 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--teacher", "1.0.0", "--version", "next"], "not a semantic version"),
        (["--teacher", "9.9.9", "--version", "1.2.0"], "no version 9.9.9 in model registry"),
        (["--teacher", "1.0.0", "--version", "1.0.0"], "already holds a model"),
        (["--teacher", "1.0.0", "--version", "1.2.0", "--hidden", "32,x"], "--hidden"),
    ],
)
def test_bad_command_lines_end_in_one_line(argv, expected, tmp_path, capsys):
    reg = tmp_path / "registry"
    shutil.copytree(TEACHER, reg / "1.0.0")
    rc = distill.main([*argv, "--simulate", "2000", "--spec", TRAILERS, "--registry", str(reg)])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (reg / "1.2.0").exists() and not (reg / "ACTIVE").exists()


def test_rows_with_a_time_hold_out_the_newest():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    t = np.array([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]) * 1000  # the first rows are the newest
    older, newest = candidate.Rows(x, None, "t", time_ms=t).split(0.2, seed=1)
    assert newest.x[:, 0].tolist() == [2.0, 0.0] and len(older.x) == 8
    _, random = candidate.Rows(x, None, "t").split(0.2, seed=1)
    assert len(random.x) == 2


def test_a_file_of_rows_without_labels_is_enough(trailers, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    x, _ = training_rows(trailers, 3_000, seed=12)
    table = pa.table({n: x[:, j] for j, n in enumerate(trailers.features.names)})
    pacsv.write_csv(table, tmp_path / "rows.csv")  # the worker's columns, no label
    reg = tmp_path / "registry"
    shutil.copytree(TEACHER, reg / "1.0.0")
    argv = ["--teacher", "1.0.0", "--version", "1.2.0", "--data", str(tmp_path / "rows.csv")]
    rc = distill.main([*argv, "--spec", TRAILERS, "--registry", str(reg), "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    report = json.loads(out.out)
    assert "accuracy" not in report and report["rows"] == 600  # nothing to score against
    assert report["top1_agreement"] > 0.9
    m = json.loads((reg / "1.2.0" / "manifest.json").read_text())
    assert m["training"]["data"] == f"file {tmp_path / 'rows.csv'}"
