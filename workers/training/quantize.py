"""Quantize a registry version with ONNX Runtime's quantization tools into a candidate.

    python -m workers.training.quantize 1.2.0 --version 1.2.1                    # dynamic INT8
    python -m workers.training.quantize 1.2.0 --version 1.2.1 --method static --simulate 20000
    python -m workers.training.quantize 1.2.0 --version 1.2.1 --method fp16      # GPU providers
    precast quantize ...                                                          # from opsctl

- `dynamic`: INT8 weights, activations quantized per batch at run time (`quantize_dynamic`);
  needs no rows.
- `static`: INT8 weights and activations, activation ranges calibrated on rows (QDQ format,
  `quantize_static`): the fleet's recorded rows (--dataset), the simulator, a file, or by
  default the source's probe.npy (rows of its training set).
- `fp16`: half-precision weights and compute for the CUDA and TensorRT providers
  (`onnxruntime.transformers.float16`, inputs and outputs kept float32 so the worker feeds it
  unchanged); on the CPU provider it is slower, not faster.

ONNX Runtime quantizes the weights of MatMul, Gemm and Conv; a tree ensemble (`ai.onnx.ml`
TreeEnsemble, what LightGBM and XGBoost become) has none, and is refused in one line: distil
it first (`precast distill`) and quantize the student. The candidate takes the source's input,
statistics, probe rows and drift reference, and `precast promote` gates it like any other.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from onnxruntime.quantization import CalibrationDataReader  # type: ignore[import-untyped]

from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.runtime import OneLineParser, run_cli
from workers.drift.reference import FILE_NAME as DRIFT_FILE
from workers.drift.reference import load_reference, save_reference
from workers.model.inference import PROBE_FILE, ModelSession
from workers.model.manifest import Manifest
from workers.training import candidate, export, slim_report
from workers.training.candidate import Rows

METHODS = ("dynamic", "static", "fp16")
# What ONNX Runtime's INT8 quantizer leaves in a graph it quantized.
_QUANTIZED_OPS = {
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "DynamicQuantizeMatMul",
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearMatMul",
    "QGemm",
    "ConvInteger",
    "QLinearConv",
}
_WEIGHT_OPS = {"MatMul", "Gemm", "Conv"}


def refusal(model: Any, who: str) -> str | None:
    """Why a graph cannot be quantized, in one line; None when it can."""
    ml = sorted({n.op_type for n in model.graph.node if n.domain == "ai.onnx.ml"})
    trees = [op for op in ml if op.startswith("TreeEnsemble")]
    if trees:
        return (
            f"{who} is a {'/'.join(trees)} graph (ai.onnx.ml): ONNX Runtime quantizes the "
            "weights of MatMul, Gemm and Conv, and a tree ensemble has none; distil it into an "
            "MLP first (precast distill --teacher ...) and quantize the student"
        )
    if ml:
        return (
            f"{who} holds ai.onnx.ml operators ({', '.join(ml)}) that ONNX Runtime's "
            "quantization does not handle; distil it into an MLP first (precast distill "
            "--teacher ...) and quantize the student"
        )
    if not any(n.op_type in _WEIGHT_OPS for n in model.graph.node):
        return f"{who} has no MatMul, Gemm or Conv: nothing ONNX Runtime quantizes"
    return None


class _Calibration(CalibrationDataReader):
    """Model-input rows for the static quantizer's calibration, in batches."""

    def __init__(self, input_name: str, x: np.ndarray, batch: int = 256) -> None:
        self._it: Iterator[dict[str, np.ndarray]] = (
            {input_name: np.ascontiguousarray(x[i : i + batch], dtype=np.float32)}
            for i in range(0, len(x), batch)
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:  # the MinMax calibrator reads the rows once
        pass


def convert(model: Any, method: str, source: Manifest, calibration: np.ndarray | None) -> Any:
    """The quantized ModelProto of `model` (an ONNX ModelProto of `source`)."""
    import onnx

    if method == "fp16":
        from onnxruntime.transformers.float16 import (  # type: ignore[import-untyped]
            convert_float_to_float16,
        )

        return convert_float_to_float16(model, keep_io_types=True)
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "consider pre-processing": the graphs here need none
    try:
        with tempfile.TemporaryDirectory(prefix="precast-quantize-") as tmp:
            src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
            onnx.save(model, str(src))
            if method == "dynamic":
                quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
            else:
                assert calibration is not None
                reader = _Calibration(source.input, calibration)
                quantize_static(
                    src,
                    dst,
                    reader,
                    quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
                )
            return onnx.load(str(dst))
    finally:
        quiet.setLevel(level)


def quantize(
    fleet: Fleet,
    source_dir: Path,
    version: str,
    out: Path,
    method: str,
    rows: Rows,
    *,
    provider: str = "cpu",
    spec: Path | str | None = None,
    calls: dict[int, int] | None = None,
    rss: bool = True,
    registry: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Quantize, write and measure a candidate of `source_dir`: (manifest, report)."""
    import onnx

    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (have: {', '.join(METHODS)})")
    source = ModelSession(source_dir, fleet=fleet, provider="cpu")
    src = source.manifest
    try:
        model = onnx.load(str(source_dir / "model.onnx"))
    except Exception as exc:  # noqa: BLE001 - onnx raises its own untyped errors
        raise ConfigError(f"cannot read {source_dir / 'model.onnx'}: {exc}") from None
    why = refusal(model, src.who())
    if why:
        raise ConfigError(why)
    x = rows.model_input(fleet, src)
    quantized = convert(model, method, src, x if method == "static" else None)
    if method != "fp16" and not any(n.op_type in _QUANTIZED_OPS for n in quantized.graph.node):
        raise ConfigError(f"{src.who()}: ONNX Runtime quantized nothing in this graph")
    raw = export.stamp(quantized, fleet, src.labels, src.output_kind)
    manifest = {
        **candidate.base_manifest(src, fleet, version),
        "method": f"quantize-{method}",
        "source": candidate.lineage(src, source_dir),
        "training": {
            "algorithm": src.raw.get("training", {}).get("algorithm"),
            "quantization": method,
            **(
                {"calibration": {"rows": len(x), "data": rows.source}} if method == "static" else {}
            ),
        },
    }
    written = candidate.write(out, raw, manifest, {}, registry=registry)
    if (source_dir / PROBE_FILE).exists():
        shutil.copyfile(source_dir / PROBE_FILE, out / PROBE_FILE)
    if (source_dir / DRIFT_FILE).exists():  # the same training distribution, another version
        ref = load_reference(source_dir, fleet.features)
        save_reference(dataclasses.replace(ref, model_version=version), out)
    slim = ModelSession(out, fleet=fleet, provider=provider)
    if provider != "cpu":
        source = ModelSession(source_dir, fleet=fleet, provider=provider)
    report = slim_report.compare(source, slim, x, rows.y, spec=spec, calls=calls, rss=rss)
    report["method"] = manifest["method"]
    written["slim"] = {
        k: report[k]
        for k in ("rows", "top1_agreement", "top3_overlap", "accuracy", "speedup")
        if k in report
    }
    candidate.write(out, raw, written, report)
    return written, report


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast quantize", description=__doc__.splitlines()[0])
    p.add_argument("source", metavar="VERSION", help="registry version to quantize, e.g. 1.2.0")
    p.add_argument("--version", required=True, help="semantic version of the candidate")
    p.add_argument("--method", choices=METHODS, default="dynamic")
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--simulate", type=int, metavar="ROWS", help="ROWS rows of the simulator")
    rows.add_argument(
        "--dataset", type=Path, metavar="DIR", help="a `precast dataset build` folder"
    )
    rows.add_argument("--data", type=Path, metavar="FILE", help="CSV/Parquet of rows")
    p.add_argument("--spec", type=Path, help="fleet spec (default PRECAST_FLEET__SPEC)")
    p.add_argument(
        "--registry",
        type=Path,
        help="model registry (default PRECAST_MODEL__REGISTRY, else the bundled models)",
    )
    p.add_argument("--out", type=Path, help="candidate folder (default <registry>/<version>)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--provider", default="cpu", help="provider the report measures on (cpu, cuda, auto)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)

    def body() -> int:
        spec = args.spec or os.environ.get("PRECAST_FLEET__SPEC") or None
        fleet = load_fleet(spec)
        registry = candidate.registry_of(fleet, args.registry)
        source = candidate.source_folder(registry, args.source)
        out = candidate.target_folder(registry, args.version, args.out)
        rows = candidate.rows_from(
            fleet,
            simulate=args.simulate,
            dataset=args.dataset,
            data=args.data,
            probe_of=source,
            seed=args.seed,
        )
        manifest, report = quantize(
            fleet,
            source,
            args.version,
            out,
            args.method,
            rows,
            provider=args.provider,
            spec=spec,
            registry=registry,
        )
        headline = (
            f"{manifest['name']} {args.version} ({manifest['method']} of {args.source}) -> {out}"
        )
        slim_report.show(report, headline, args.version, as_json=args.json)
        return 0

    return run_cli("quantize", body, one_line_bugs=True)


if __name__ == "__main__":
    raise SystemExit(main())
