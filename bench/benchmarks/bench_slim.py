"""Slimmer models for a slow one (issue 38): the trailers fleet's LightGBM (the teacher), the MLP
student `precast distill` makes of it and that student quantized by `precast quantize`
(dynamic INT8: the LightGBM graph cannot be quantized, the refusal is in the notes), in one run
and on the same rows:

- agreement with the teacher (top-1, top-3 overlap as `precast shadow` measures it) and accuracy
  against the simulator's truth, on one fresh simulation none of them trained on;
- inference through the worker's `ModelSession` (one thread, CPU provider): rows/s at batch 1 and
  256, p99 and p99.9 of the time per batch, the three models alternated round by round;
- resident memory each loaded session adds to a fresh process;
- worker events/s over a backlog on the real broker (bench fleets' measurement, the model folder
  swapped), alternated, best of the rounds;
- what the speculation policy saves with each (bench speculation's arms on the trailers fleet
  with its own serving settings: predict-on-every-event inferences over the policy's), and the
  hit ratio each reaches.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.support.harness import Context, Figure, Report, progress

NAME = "slim"
DESCRIPTION = (
    "trailers LightGBM vs its distilled MLP student vs the student quantized: agreement, "
    "worker events/s, inference tails, session RSS, speculation savings"
)
SPARE_CPU = (
    "one core for this process and one for the broker: the worker rates and the inference "
    "timings are CPU-bound and alternated between the models, so their ratios hold on a busy "
    "machine better than their absolute values; the tails (p99.9) are the first to suffer from "
    "anything else running. Agreement, accuracy and the speculation counts do not depend on CPU."
)
TEACHER = "reefer-service/1.0.0"
ROLES = ("teacher", "student", "quantized")


def _models(fleet, reg: Path, rows: int) -> tuple[dict[str, Path], str]:
    """The teacher, its distilled student, the student quantized; and why the teacher itself
    could not be quantized."""
    import onnx

    from workers.model.manifest import Manifest
    from workers.settings import DEFAULT_MODEL_DIR
    from workers.training import candidate, distill, quantize

    src = DEFAULT_MODEL_DIR.parent.parent / TEACHER
    shutil.copytree(src, reg / "1.0.0")
    progress(f"slim: distilling the trailers LightGBM into an MLP on {rows:,} simulated rows ...")
    sim = candidate.rows_from(fleet, simulate=rows, seed=3)
    few = {1: 10, 256: 2}  # the commands' own reports; the bench measures below
    distill.distill(fleet, reg / "1.0.0", sim, "1.2.0", reg / "1.2.0", seed=3, calls=few, rss=False)
    who = Manifest.load(reg / "1.0.0" / "manifest.json").who()
    refused = quantize.refusal(onnx.load(str(reg / "1.0.0" / "model.onnx")), who) or "(none)"
    progress("slim: quantizing the student (dynamic INT8) ...")
    probe = candidate.rows_from(fleet, probe_of=reg / "1.2.0")
    quantize.quantize(
        fleet, reg / "1.2.0", "1.2.1", reg / "1.2.1", "dynamic", probe, calls=few, rss=False
    )
    return {"teacher": reg / "1.0.0", "student": reg / "1.2.0", "quantized": reg / "1.2.1"}, refused


def _inference(sessions: dict, x: np.ndarray, calls: dict[int, int], rounds: int) -> dict:
    """Per model and batch size: every timing of `rounds` alternated rounds, summarised."""
    from workers.training.slim_report import summary, timings

    took: dict[str, dict[int, list[np.ndarray]]] = {r: {b: [] for b in calls} for r in sessions}
    for _ in range(rounds):
        for role, s in sessions.items():
            for b, n in calls.items():
                took[role][b].append(timings(s, x, b, n))
    return {
        role: {b: summary(np.concatenate(t), b) for b, t in per.items()}
        for role, per in took.items()
    }


def _worker_rates(ctx: Context, folders: dict[str, Path], rounds: int) -> dict[str, float]:
    from bench.support.parts.worker_run import fleet_worker_rate
    from precast.kafka import Admin

    admin = Admin(ctx.kafka_settings())
    devices, hb_rounds = (10_000, 3) if ctx.quick else (50_000, 3)
    best: dict[str, float] = {}
    for r in range(rounds):
        for role, folder in folders.items():
            progress(f"slim: worker events/s with the {role} (round {r + 1} of {rounds}) ...")
            rate = fleet_worker_rate(ctx, admin, "trailers", devices, hb_rounds, model=folder)
            best[role] = max(best.get(role, 0.0), rate)
    return best


def _speculation(fleet, sessions: dict, quick: bool) -> dict:
    from bench.support.parts.speculation_run import simulate
    from workers.precompute.config import PolicyConfig

    devices, seconds, read_rate = (300, 20, 20.0) if quick else (500, 40, 20.0)
    out: dict[str, Any] = {}
    for role in ("teacher", "student"):
        progress(f"slim: speculation, every event vs the policy, with the {role} ...")
        res = simulate(
            "noisy",
            {"every event": PolicyConfig(every_event=True), "policy": PolicyConfig()},
            sessions[role],
            devices=devices,
            seconds=seconds,
            read_rate=read_rate,
            spec_fleet=fleet,
        )
        base, pol = res["every event"], res["policy"]
        out[role] = {
            "savings": base.inferences / max(pol.inferences, 1),
            "hit_ratio": pol.hits / max(pol.reads, 1),
            "inferences": pol.inferences,
            "events": pol.events,
        }
    out["conditions"] = (
        f"profile noisy, {devices} devices, 1 heartbeat/s for {seconds} s (virtual clock), "
        f"Zipf reads at {read_rate:.0f}/s + a paging operator, policy defaults, the trailers "
        f"spec's top_k {fleet.spec.serving.top_k} and horizon {fleet.spec.serving.horizon_s:g} s"
    )
    return out


def run(ctx: Context) -> Report:
    from precast.fleet import load_fleet
    from precast.fleet.simulate.training import training_rows
    from schemas.spec import FLEETS
    from workers.model.inference import ModelSession
    from workers.training.slim_report import accuracy, agreement, session_rss_bytes

    spec = FLEETS / "trailers.toml"
    fleet = load_fleet(spec)
    tmp = Path(tempfile.mkdtemp(prefix="bench-slim-"))
    try:
        folders, refused = _models(fleet, tmp, 20_000 if ctx.quick else 60_000)  # distill rows
        sessions = {
            r: ModelSession(f, fleet=fleet, provider="cpu", intra_op_threads=1)
            for r, f in folders.items()
        }
        n = 4_000 if ctx.quick else 20_000
        progress(f"slim: the same {n:,} fresh simulated rows through the three models ...")
        x_raw, y = training_rows(fleet, n, seed=20261204)
        stats = sessions["teacher"].standardization
        x = fleet.features.standardize(x_raw, stats) if stats else x_raw
        probs = {r: s.predict(x) for r, s in sessions.items()}
        agree = {
            "student": agreement(probs["teacher"], probs["student"]),
            "quantized": agreement(probs["teacher"], probs["quantized"]),
            "quantized/student": agreement(probs["student"], probs["quantized"]),
        }
        acc = {r: accuracy(p, y) for r, p in probs.items()}
        calls = {1: 2_000, 256: 200} if ctx.quick else {1: 20_000, 256: 2_000}
        rounds = 2 if ctx.quick else 3
        progress(f"slim: inference timings, {rounds} alternated rounds ...")
        speed = _inference(sessions, x, calls, rounds)
        progress("slim: resident memory of each loaded session (a fresh process each) ...")
        rss = {r: session_rss_bytes(f, spec) for r, f in folders.items()}
        rates = _worker_rates(ctx, folders, 1 if ctx.quick else 2)
        spec_out = _speculation(fleet, sessions, ctx.quick)
        size = {r: (f / "model.onnx").stat().st_size for r, f in folders.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sizes = {"rows": n, "distill_rows": 20_000 if ctx.quick else 60_000, "calls": calls,
             "rounds": rounds, "backlog": 30_000 if ctx.quick else 150_000}  # fmt: skip
    return _report(agree, acc, speed, rss, rates, spec_out, size, refused, sizes)


def _report(agree, acc, speed, rss, rates, spec_out, size, refused, sizes) -> Report:
    n, calls, rounds = sizes["rows"], sizes["calls"], sizes["rounds"]
    rows = []
    for role in ROLES:
        a = agree.get(role, {"top1_agreement": 1.0, "top3_overlap": 1.0})
        s1, s256 = speed[role][1], speed[role][256]
        rows.append(
            [
                role,
                a["top1_agreement"],
                a["top3_overlap"],
                acc[role]["top1"],
                size[role],
                round(s1["rows_per_s"]),
                s1["p99_us"],
                s1["p999_us"],
                round(s256["rows_per_s"]),
                s256["p99_us"],
                s256["p999_us"],
                round((rss[role] or 0) / 2**20, 1),
                round(rates[role]),
            ]
        )
    same = f"the same {n:,} fresh simulated trailers rows (seed 20261204)"
    timing = (
        f"ModelSession on the CPU provider, 1 thread; {calls[1]:,} batches of 1 and "
        f"{calls[256]:,} of 256 per round, {rounds} rounds alternated, all timings pooled"
    )
    worker = (
        f"worker events/s over a backlog of {sizes['backlog']:,} trailers heartbeats (bench fleets), "
        "best of the alternated rounds"
    )
    st, te = spec_out["student"], spec_out["teacher"]
    q_b256 = speed["quantized"][256]["rows_per_s"] / speed["student"][256]["rows_per_s"]
    q_b1 = speed["quantized"][1]["rows_per_s"] / speed["student"][1]["rows_per_s"]
    figures = [
        Figure(
            "distill_worker_speedup",
            round(rates["student"] / rates["teacher"], 3),
            "x",
            f"goal >= 2.5; teacher {rates['teacher']:,.0f}, student {rates['student']:,.0f} events/s",
            worker,
        ),
        Figure(
            "distill_top1_agreement",
            agree["student"]["top1_agreement"],
            "ratio",
            f"goal >= 0.99; top-3 overlap {agree['student']['top3_overlap']:.4f}",
            f"student vs teacher on {same}",
        ),
        Figure(
            "distill_accuracy_drop",
            round(acc["teacher"]["top1"] - acc["student"]["top1"], 5),
            "ratio",
            f"teacher top-1 {acc['teacher']['top1']:.4f}, student {acc['student']['top1']:.4f}",
            f"against the simulator's truth on {same}",
        ),
        Figure(
            "quantize_top1_agreement",
            agree["quantized/student"]["top1_agreement"],
            "ratio",
            f"goal >= 0.995; vs the teacher {agree['quantized']['top1_agreement']:.4f}",
            f"dynamic INT8 student vs the student it was made of, on {same} (the LightGBM "
            "teacher cannot be quantized)",
        ),
        Figure(
            "quantize_rows_per_s_ratio",
            round(q_b256, 3),
            "x",
            f"quantized over the student at batch 256; at batch 1: {q_b1:.3f}",
            timing,
        ),
        Figure(
            "quantize_worker_speedup",
            round(rates["quantized"] / rates["student"], 3),
            "x",
            f"quantized {rates['quantized']:,.0f} vs student {rates['student']:,.0f} events/s",
            worker,
        ),
        Figure(
            "slim_speculation_savings_ratio",
            round(st["savings"] / te["savings"], 3),
            "x",
            f"student savings {st['savings']:.2f} (hit ratio {st['hit_ratio']:.4f}) over the "
            f"teacher's {te['savings']:.2f} (hit ratio {te['hit_ratio']:.4f})",
            spec_out["conditions"],
        ),
    ]
    for role in ROLES:
        for b in (1, 256):
            figures += [
                Figure(
                    f"slim_{role}_p99_us_batch{b}",
                    speed[role][b]["p99_us"],
                    "us",
                    f"p99.9 {speed[role][b]['p999_us']:,.0f} us, p50 {speed[role][b]['p50_us']:,.0f} us",
                    timing,
                ),
                Figure(
                    f"slim_{role}_p999_us_batch{b}",
                    speed[role][b]["p999_us"],
                    "us",
                    f"p99 {speed[role][b]['p99_us']:,.0f} us",
                    timing,
                ),
            ]
        figures.append(
            Figure(
                f"slim_{role}_session_rss_mb",
                round((rss[role] or 0) / 2**20, 2),
                "MiB",
                f"model.onnx {size[role]:,} bytes",
                "VmRSS a loaded session adds (load + one batch of 256) in a fresh interpreter",
            )
        )
    return Report(
        "Slim models: the trailers LightGBM, its distilled student, the student quantized "
        "(`python -m bench slim`)",
        [
            "model",
            "top-1 agreement",
            "top-3 overlap",
            "accuracy",
            "bytes",
            "rows/s b1",
            "p99 us b1",
            "p99.9 us b1",
            "rows/s b256",
            "p99 us b256",
            "p99.9 us b256",
            "RSS MiB",
            "worker events/s",
        ],
        rows,
        figures,
        [
            f"agreement is with the teacher; accuracy against the simulator's truth; both on {same}",
            f"teacher = workers/models/{TEACHER} (LightGBM, ai.onnx.ml TreeEnsemble); student = "
            f"`precast distill --teacher 1.0.0 --simulate {sizes['distill_rows']} --seed 3` (MLP 32-16 on the "
            "teacher's centred log-probabilities); quantized = `precast quantize 1.2.0 --method "
            "dynamic` (the student: the teacher is refused)",
            f"the teacher's refusal, as `precast quantize` prints it: {refused}",
            timing,
            worker,
            f"speculation: {spec_out['conditions']}; savings = every-event inferences / the "
            "policy's; the savings ratio compares student and teacher at the hit ratios shown",
        ],
    )
