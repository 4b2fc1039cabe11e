"""Distil a registry version into a small MLP trained on its soft labels.

    python -m workers.training.distill --teacher 1.0.0 --version 1.2.0 --simulate 60000
    python -m workers.training.distill --teacher 1.0.0 --version 1.2.0 --dataset ds/
    precast distill ...                                                  # the same, from opsctl

No labels are needed: the teacher's probabilities (ONNX Runtime, through the worker's own
session) are the targets. The student (scikit-learn MLPRegressor) regresses the teacher's
centred log-probabilities, so the softmax of its output matches the teacher's whole
distribution, not only its top-1; it is written with standard ONNX operators only (Sub, Div,
MatMul, Add, Relu, Softmax: GPU friendly, and smooth, so the speculation policy's sensitivity
estimate sees real slopes where a tree ensemble's steps show none). It takes the teacher's input
(the same feature matrix and statistics) and goes into the registry as a candidate
(docs/models.md): `precast promote` gates it like any other.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.runtime import OneLineParser, run_cli
from workers.drift.reference import build_reference, save_reference
from workers.model.inference import PROBE_FILE, PROBE_ROWS, ModelSession
from workers.training import candidate, export, slim_report
from workers.training.candidate import Rows

METHOD = "distill"
HIDDEN = (32, 16)
_FLOOR = 1e-6  # probabilities below this are one: log(0) has no gradient to follow


def soft_targets(probs: np.ndarray) -> np.ndarray:
    """The teacher's log-probabilities, centred per row (softmax gives `probs` back)."""
    z = np.log(np.clip(probs.astype(np.float64), _FLOOR, 1.0))
    return z - z.mean(axis=1, keepdims=True)


def predict_all(session: ModelSession, x: np.ndarray, batch: int = 8_192) -> np.ndarray:
    return np.concatenate(
        [session.predict(x[i : i + batch]) for i in range(0, len(x), batch)]
        or [np.zeros((0, len(session.labels)), dtype=np.float32)]
    )


def fit_student(
    x: np.ndarray, targets: np.ndarray, hidden: tuple[int, ...], seed: int
) -> tuple[Any, np.ndarray, np.ndarray]:
    """(regressor, mean, scale): an MLP on standardized inputs, as `precast train`'s."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor

    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-6] = 1.0
    reg = MLPRegressor(
        hidden_layer_sizes=hidden,
        max_iter=200,
        random_state=seed,
        early_stopping=True,
        n_iter_no_change=10,
        batch_size=256,
    )
    with warnings.catch_warnings():
        # the epoch cap is a budget, not an error: the report says how close the student came
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit((x - mean) / scale, targets)
    return reg, mean, scale


def distill(
    fleet: Fleet,
    teacher_dir: Path,
    rows: Rows,
    version: str,
    out: Path,
    *,
    hidden: tuple[int, ...] = HIDDEN,
    seed: int = 7,
    holdout: float = 0.2,
    provider: str = "cpu",
    spec: Path | str | None = None,
    calls: dict[int, int] | None = None,
    rss: bool = True,
    registry: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train, export, write and measure a student of `teacher_dir`: (manifest, report)."""
    teacher = ModelSession(teacher_dir, fleet=fleet, provider="cpu")
    train_rows, test_rows = rows.split(holdout, seed)
    if len(train_rows.x) < 100 or len(test_rows.x) < 10:
        raise ConfigError(f"{len(rows.x)} rows are too few to distil from: give 1,000 or more")
    x = train_rows.model_input(fleet, teacher.manifest)
    started = time.perf_counter()
    reg, mean, scale = fit_student(x, soft_targets(predict_all(teacher, x)), hidden, seed)
    seconds = time.perf_counter() - started
    model = export.mlp_to_onnx("precast-student", mean, scale, reg.coefs_, reg.intercepts_)
    raw = export.stamp(model, fleet, teacher.labels)
    _check_export(raw, reg, x[:4_096], mean, scale)
    src = teacher.manifest
    manifest = {
        **candidate.base_manifest(src, fleet, version),
        "output": export.OUTPUT_NAME,
        "output_kind": "probabilities",
        "method": METHOD,
        "teacher": candidate.lineage(src, teacher_dir),
        "training": {
            "algorithm": "mlp",
            "hidden": list(hidden),
            "targets": "the teacher's centred log-probabilities (squared error)",
            "seed": seed,
            "samples": len(x),
            "epochs": int(reg.n_iter_),
            "seconds": round(seconds, 1),
            "data": rows.source,
            **({"dataset": rows.dataset} if rows.dataset else {}),
        },
    }
    written = candidate.write(out, raw, manifest, {}, registry=registry)
    save_reference(build_reference(x, version, fleet.features), out)
    np.save(out / PROBE_FILE, x[:PROBE_ROWS].astype(np.float32))
    student = ModelSession(out, fleet=fleet, provider=provider)
    if provider != "cpu":
        teacher = ModelSession(teacher_dir, fleet=fleet, provider=provider)
    x_test = test_rows.model_input(fleet, teacher.manifest)
    report = slim_report.compare(
        teacher, student, x_test, test_rows.y, spec=spec, calls=calls, rss=rss
    )
    report["method"] = METHOD
    written["slim"] = _summary(report)
    candidate.write(out, raw, written, report)
    return written, report


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the manifest keeps of the report (metrics.json has all of it)."""
    keep = ("rows", "top1_agreement", "top3_overlap", "accuracy", "speedup")
    return {k: report[k] for k in keep if k in report}


def _check_export(raw: bytes, reg: Any, x: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> None:
    import onnxruntime as ort

    sess = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
    got = sess.run([export.OUTPUT_NAME], {export.INPUT_NAME: x.astype(np.float32)})[0]
    z = reg.predict((x - mean) / scale)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    want = z / z.sum(axis=1, keepdims=True)
    if not np.allclose(got, want, atol=1e-4):
        raise ConfigError(
            f"the exported student disagrees with the trained one (max difference "
            f"{float(np.abs(got - want).max()):.2g})"
        )


def hidden_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--hidden {text!r}: layer widths separated by commas, e.g. 32,16"
        ) from None
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"--hidden {text!r}: every layer needs a width of 1 or more")
    return sizes


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast distill", description=__doc__.splitlines()[0])
    p.add_argument("--teacher", required=True, help="registry version to distil, e.g. 1.0.0")
    p.add_argument("--version", required=True, help="semantic version of the student, e.g. 1.2.0")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--simulate", type=int, metavar="ROWS", help="ROWS rows of the simulator")
    src.add_argument(
        "--dataset",
        type=Path,
        metavar="DIR",
        help="a `precast dataset build` folder: the fleet's recorded rows, point in time",
    )
    src.add_argument(
        "--data", type=Path, metavar="FILE", help="CSV/Parquet of feature columns or sources"
    )
    p.add_argument("--spec", type=Path, help="fleet spec (default PRECAST_FLEET__SPEC)")
    p.add_argument(
        "--registry",
        type=Path,
        help="model registry (default PRECAST_MODEL__REGISTRY, else the bundled models)",
    )
    p.add_argument("--out", type=Path, help="student folder (default <registry>/<version>)")
    p.add_argument("--hidden", default="32,16", help="hidden layer widths (default 32,16)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--holdout", type=float, default=0.2, help="share of rows the report uses")
    p.add_argument(
        "--provider", default="cpu", help="provider the report measures on (cpu, cuda, auto)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)

    def body() -> int:
        spec = args.spec or os.environ.get("PRECAST_FLEET__SPEC") or None
        fleet = load_fleet(spec)
        if not 0 < args.holdout < 1:
            raise ConfigError("--holdout is a share between 0 and 1")
        hidden = hidden_sizes(args.hidden)
        registry = candidate.registry_of(fleet, args.registry)
        teacher = candidate.source_folder(registry, args.teacher)
        out = candidate.target_folder(registry, args.version, args.out)
        rows = candidate.rows_from(
            fleet, simulate=args.simulate, dataset=args.dataset, data=args.data, seed=args.seed
        )
        manifest, report = distill(
            fleet,
            teacher,
            rows,
            args.version,
            out,
            hidden=hidden,
            seed=args.seed,
            holdout=args.holdout,
            provider=args.provider,
            spec=spec,
            registry=registry,
        )
        headline = f"{manifest['name']} {args.version} (student of {args.teacher}) -> {out}"
        slim_report.show(report, headline, args.version, as_json=args.json)
        return 0

    return run_cli("distill", body, one_line_bugs=True)


if __name__ == "__main__":
    raise SystemExit(main())
