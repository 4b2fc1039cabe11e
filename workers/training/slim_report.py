"""What a slimmer model (a distilled student, a quantized copy) costs and buys against the model
it came from, on the same rows: top-1 agreement and top-3 overlap with it (the shadow gate's two
measures), accuracy on labelled rows where there are any, the bytes of model.onnx, rows/s at
batch 1 and 256 with p50, p99 and p99.9 of the time per batch, and the resident memory of the
loaded session. Every figure goes through the worker's own `ModelSession`, so it is what a worker
would see (its threads, its providers, its output handling).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from workers.model.inference import ModelSession

BATCHES = (1, 256)


def agreement(reference: np.ndarray, other: np.ndarray, k: int = 3) -> dict[str, float]:
    """Top-1 agreement and top-k overlap of `other` with `reference` (probabilities, same
    rows): the overlap is the share of the reference's top-k labels in the other's top-k,
    as `precast shadow` measures it."""
    if len(reference) == 0:
        return {"top1_agreement": 1.0, "top3_overlap": 1.0}
    k = min(k, reference.shape[1])
    ri = np.argsort(-reference, axis=1, kind="stable")[:, :k]
    oi = np.argsort(-other, axis=1, kind="stable")[:, :k]
    overlap = (ri[:, :, None] == oi[:, None, :]).any(axis=2).mean(axis=1)
    return {
        "top1_agreement": round(float((ri[:, 0] == oi[:, 0]).mean()), 5),
        "top3_overlap": round(float(overlap.mean()), 5),
    }


def accuracy(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    k = min(3, probs.shape[1])
    top = np.argsort(-probs, axis=1)[:, :k]
    return {
        "top1": round(float((top[:, 0] == y).mean()), 5),
        "top3": round(float((top == y[:, None]).any(axis=1).mean()), 5),
    }


def timings(session: ModelSession, x: np.ndarray, batch: int, calls: int) -> np.ndarray:
    """Seconds per `predict` over `calls` batches of `batch` rows taken in turn from `x`
    (after a warm-up of a tenth of them)."""
    starts = np.arange(min(calls, 64)) * batch % max(1, len(x) - batch + 1)
    batches = [np.ascontiguousarray(x[s : s + batch], dtype=np.float32) for s in starts]
    for i in range(max(1, calls // 10)):
        session.predict(batches[i % len(batches)])
    took = np.empty(calls)
    clock = time.perf_counter
    for i in range(calls):
        b = batches[i % len(batches)]
        t = clock()
        session.predict(b)
        took[i] = clock() - t
    return took


def summary(took: np.ndarray, batch: int) -> dict[str, float]:
    """rows/s and the time per batch (p50, p99, p99.9 in microseconds)."""
    us = took * 1e6
    return {
        "batch": batch,
        "rows_per_s": round(batch * len(took) / float(took.sum()), 1),
        "p50_us": round(float(np.quantile(us, 0.5)), 1),
        "p99_us": round(float(np.quantile(us, 0.99)), 1),
        "p999_us": round(float(np.quantile(us, 0.999)), 1),
        "calls": len(took),
    }


def speed(session: ModelSession, x: np.ndarray, batch: int, calls: int) -> dict[str, float]:
    return summary(timings(session, x, batch, calls), batch)


def session_rss_bytes(folder: Path, spec: Path | str | None, provider: str = "cpu") -> int | None:
    """Resident memory a loaded session adds to a process (VmRSS after loading and one batch
    of 256 rows, minus before), measured in a fresh interpreter so nothing else loaded counts;
    None where /proc is not there."""
    if not Path("/proc/self/status").exists():
        return None
    code = (
        "import sys; from workers.training.slim_report import _child_rss; "
        "_child_rss(sys.argv[1], sys.argv[2] or None, sys.argv[3])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(spec or ""), provider],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _child_rss(folder: str, spec: str | None, provider: str) -> None:
    import onnxruntime  # noqa: F401 - loaded before the first reading: the library is not the model

    from precast.fleet import load_fleet

    fleet = load_fleet(spec)
    np.zeros(1)
    before = _rss()
    session = ModelSession(Path(folder), fleet=fleet, provider=provider, warmup_rows=0)
    session.predict(np.zeros((256, fleet.features.width), dtype=np.float32))
    print(_rss() - before)


def measure(session: ModelSession, x: np.ndarray, calls: dict[int, int]) -> dict[str, Any]:
    """One model's own figures: bytes, provider, rows/s and tails per batch size."""
    return {
        "version": session.version,
        "bytes": (session.folder / "model.onnx").stat().st_size,
        "provider": session.providers[0],
        "speed": {str(b): speed(session, x, b, calls[b]) for b in BATCHES},
    }


def compare(
    reference: ModelSession,
    slim: ModelSession,
    x: np.ndarray,
    y: np.ndarray | None,
    *,
    spec: Path | str | None = None,
    calls: dict[int, int] | None = None,
    rss: bool = True,
) -> dict[str, Any]:
    """The report of `slim` against `reference` on the (n, F) model input `x` (standardized as
    the worker feeds it), with `y` the label indexes of labelled rows (or None)."""
    calls = calls or {1: 2_000, 256: 200}
    p_ref, p_slim = reference.predict(x), slim.predict(x)
    report: dict[str, Any] = {"rows": len(x), **agreement(p_ref, p_slim)}
    if y is not None and len(y):
        report["accuracy"] = {"reference": accuracy(p_ref, y), "slim": accuracy(p_slim, y)}
    models = {"reference": measure(reference, x, calls), "slim": measure(slim, x, calls)}
    if rss:
        for role, s in (("reference", reference), ("slim", slim)):
            models[role]["rss_bytes"] = session_rss_bytes(s.folder, spec)
    report["models"] = models
    report["speedup"] = {
        str(b): round(
            models["slim"]["speed"][str(b)]["rows_per_s"]
            / models["reference"]["speed"][str(b)]["rows_per_s"],
            3,
        )
        for b in BATCHES
    }
    return report


def lines(report: dict[str, Any]) -> list[str]:
    """The report in a few lines for a command's output."""
    m = report["models"]
    ref, slim = m["reference"], m["slim"]
    out = [
        f"agreement with {ref['version']} on {report['rows']:,} rows: top-1 "
        f"{report['top1_agreement']:.4f}, top-3 overlap {report['top3_overlap']:.4f}"
    ]
    if "accuracy" in report:
        a = report["accuracy"]
        out.append(
            f"accuracy on labelled rows: {ref['version']} {a['reference']['top1']:.4f}, "
            f"{slim['version']} {a['slim']['top1']:.4f} (top-3 {a['reference']['top3']:.4f} "
            f"/ {a['slim']['top3']:.4f})"
        )
    for role in ("reference", "slim"):
        r = m[role]
        rss = r.get("rss_bytes")
        speeds = ", ".join(
            f"batch {b}: {r['speed'][b]['rows_per_s']:,.0f} rows/s "
            f"(p99 {r['speed'][b]['p99_us']:.0f} us, p99.9 {r['speed'][b]['p999_us']:.0f} us)"
            for b in r["speed"]
        )
        mem = f", session RSS {rss / 2**20:.1f} MiB" if rss is not None else ""
        out.append(f"{r['version']}: {r['bytes']:,} bytes{mem}, {r['provider']}; {speeds}")
    return out


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2) + "\n"


def show(report: dict[str, Any], headline: str, version: str, *, as_json: bool) -> None:
    """What `precast distill` and `precast quantize` print: the report as JSON, or a headline,
    its lines and the next step."""
    if as_json:
        sys.stdout.write(dumps(report))
        return
    print(headline)
    for line in lines(report):
        print(f"  {line}")
    print(f"next: precast promote {version} (the shadow gate on recent traffic)")
