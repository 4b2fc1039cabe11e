"""GPU check: which ONNX Runtime providers work here, and rows/s of the bundled model at
several batch sizes on each GPU provider against CPU.

    python -m workers.gpu_check [--model DIR] [--sizes 1,64,512,4096,32768] [--seconds 1.0]

Meant for a machine with an NVIDIA GPU and no network, where the project tree was copied and
nothing can be installed: it needs only the standard library, numpy and onnxruntime (any
build). Each provider is measured in a child process with a deadline, so a provider that hangs
(a TensorRT engine build, a broken driver) is reported as such and the whole run stays under
`--budget` seconds (default 240). Exit 0 with a table when a GPU provider was measured;
otherwise one line on stderr and exit 3 (no usable GPU provider) or 2 (cannot run at all).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from precast.runtime import OneLineParser

DEFAULT_MODEL = Path(__file__).parent / "models" / "fleet-strategy" / "1.0.0"
GPU_PROVIDERS = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
CPU = "CPUExecutionProvider"


def fail(code: int, message: str) -> int:
    print(f"gpu_check: {message}", file=sys.stderr, flush=True)
    return code


def gpu_visible() -> tuple[bool, str]:
    """Is an NVIDIA driver/GPU present? (onnxruntime-gpu lists its providers regardless.)"""
    if Path("/proc/driver/nvidia/version").exists():
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=15)
                return True, out.stdout.strip().splitlines()[
                    0
                ] if out.stdout.strip() else "driver present"
            except (subprocess.TimeoutExpired, OSError) as exc:
                return True, f"driver present (nvidia-smi: {exc})"
        return True, "driver present"
    return False, "no NVIDIA driver (/proc/driver/nvidia/version missing)"


# -- child: one provider, all sizes ------------------------------------------------------------------
def measure(provider: str, model: Path, sizes: list[int], seconds: float, device_id: int) -> dict:
    import numpy as np
    import onnxruntime as ort

    manifest = json.loads((model / "manifest.json").read_text())
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = max(1, min(4, os.cpu_count() or 1))
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers: list = [CPU] if provider == CPU else [(provider, {"device_id": device_id}), CPU]
    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(model / "model.onnx"), sess_options=opts, providers=providers)
    active = sess.get_providers()[0]
    if active != provider:  # ORT falls back to CPU silently when a GPU provider cannot start
        return {"provider": provider, "error": f"session fell back to {active}"}
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        x = rng.normal(size=(n, len(manifest["features"]))).astype(np.float32)
        sess.run(
            [manifest["output"]], {manifest["input"]: x}
        )  # warm-up (engine build, allocations)
        done, calls, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            sess.run([manifest["output"]], {manifest["input"]: x})
            done += n
            calls += 1
        el = time.perf_counter() - start
        rows.append({"batch": n, "rows_per_s": done / el, "ms_per_call": 1000 * el / calls})
    return {"provider": provider, "setup_s": round(time.perf_counter() - t0, 2), "rows": rows}


def child(args: argparse.Namespace) -> int:
    try:
        result = measure(args.child, Path(args.model), args.sizes, args.seconds, args.device_id)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as data
        result = {
            "provider": args.child,
            "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
        }
    print(json.dumps(result), flush=True)
    return 0


def run_child(provider: str, args: argparse.Namespace, timeout: float) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "workers.gpu_check",
        "--child",
        provider,
        "--model",
        str(args.model),
        "--sizes",
        ",".join(map(str, args.sizes)),
        "--seconds",
        str(args.seconds),
        "--device-id",
        str(args.device_id),
    ]
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=max(5.0, timeout), cwd=root
        )
    except subprocess.TimeoutExpired:
        return {"provider": provider, "error": f"no result within {timeout:.0f}s (killed)"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"provider": provider, "error": f"child exited {out.returncode}: {tail[:300]}"}
    return json.loads(lines[-1])


def table(results: list[dict], sizes: list[int]) -> str:
    cpu = next((r for r in results if r["provider"] == CPU and "rows" in r), None)
    base = {row["batch"]: row["rows_per_s"] for row in cpu["rows"]} if cpu else {}
    lines = [f"{'provider':<28} {'batch':>7} {'rows/s':>14} {'ms/call':>9} {'vs CPU':>8}"]
    for r in results:
        if "rows" not in r:
            lines.append(f"{r['provider']:<28} {'-':>7} {'unusable: ' + r['error']}")
            continue
        for row in r["rows"]:
            ratio = row["rows_per_s"] / base[row["batch"]] if row["batch"] in base else float("nan")
            lines.append(
                f"{r['provider']:<28} {row['batch']:>7} {row['rows_per_s']:>14,.0f} "
                f"{row['ms_per_call']:>9.3f} {ratio:>7.2f}x"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m workers.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 64, 512, 4096, 32768]
    )
    p.add_argument("--seconds", type=float, default=1.0, help="measuring time per batch size")
    p.add_argument(
        "--budget", type=float, default=240.0, help="wall-clock limit of the whole check"
    )
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument(
        "--cpu-only-ok", action="store_true", help="(tests) measure CPU even without a GPU"
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    started = time.monotonic()
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return fail(2, f"onnxruntime is not importable here: {exc}")
    if not (Path(args.model) / "model.onnx").is_file():
        return fail(2, f"no model.onnx in {args.model}")
    available = ort.get_available_providers()
    visible, gpu_note = gpu_visible()
    print(
        f"python {platform.python_version()}, onnxruntime {ort.__version__}, providers: {', '.join(available)}"
    )
    print(f"gpu: {gpu_note}", flush=True)
    gpus = [v for v in GPU_PROVIDERS.values() if v in available]
    if not args.cpu_only_ok:
        if not gpus:
            return fail(
                3, f"no GPU provider in this onnxruntime build (has: {', '.join(available)})"
            )
        if not visible:
            return fail(3, f"no usable GPU provider: {gpu_note}")
    todo = (
        [g for g in ("CUDAExecutionProvider", "TensorrtExecutionProvider") if g in gpus]
        if visible
        else []
    )
    results = []
    for provider in [*todo, CPU]:
        left = args.budget - (time.monotonic() - started)
        if left < 10:
            results.append({"provider": provider, "error": "skipped: time budget spent"})
            continue
        # TensorRT builds engines per shape: give GPU providers most of what is left.
        share = left * (0.6 if provider != CPU and provider != todo[-1] else 0.9)
        print(f"measuring {provider} (deadline {share:.0f}s) ...", file=sys.stderr, flush=True)
        results.append(run_child(provider, args, share))
    print(table(results, args.sizes), flush=True)
    usable = [r for r in results if r["provider"] != CPU and "rows" in r]
    if not usable and not args.cpu_only_ok:
        errors = "; ".join(
            f"{r['provider']}: {r['error']}" for r in results if r["provider"] != CPU
        )
        return fail(3, f"no usable GPU provider ({errors})")
    print(f"gpu_check: done in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
