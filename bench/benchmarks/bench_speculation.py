"""What speculation buys: the worker's policy against predict-on-every-event, side by side on the
same event stream and the same reads (docs/workers.md, "The speculation trade-off"), and what it
costs to keep answers valid: validity leases against republishing every stable answer before
its horizon (main's whole renewals), in records per inference and audit-log bytes
(docs/workers.md, "Validity leases").

Both arms run the real worker pipeline (decode, policy, features, the shipped ONNX model, top-K,
encode) in one process on a virtual clock, fed the same simulated fleet (`producers.simulator`,
per profile) and read by the same operators:
- Zipf reads over the fleet (a few devices are read all the time, most rarely),
- an operator paging through the device list, prefetching the next page before moving on.
Reads feed hotness back to the workers (as the read API does through the read-hints topic), a
read that finds no valid answer asks for one (as the API does), and at every read the served
answer is compared with a fresh on-demand inference on the device's newest data. What an arm
publishes is served through the read API's own store (`precast.serving.MemoryStore`, leases
included), and for the renewal comparison appended to a real audit log (`precast.audit`).
"""

from __future__ import annotations

from bench.support.harness import Context, Figure, Report, progress
from bench.support.parts.speculation_arm import WARMUP_MS, Outcome
from bench.support.parts.speculation_run import HOT_FOR_MS, simulate
from workers.model.inference import ModelSession
from workers.precompute.config import LeaseConfig, PolicyConfig
from workers.settings import DEFAULT_MODEL_DIR

NAME = "speculation"
DESCRIPTION = "policy vs predict-on-every-event: inferences, hit ratio, answer quality"
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "none: both arms run on a virtual clock in one process, so inferences, records, hit ratio, "
    "agreement and audit bytes are counts that do not depend on CPU; a busy machine only makes "
    "the run take longer."
)

WHOLE = LeaseConfig(enabled=False)  # main's way: every stable answer republished before expiry


def _row(profile: str, name: str, o: Outcome, base: Outcome) -> list:
    return [
        profile,
        name,
        o.events,
        o.inferences,
        round(o.inferences / max(o.events, 1), 4),
        round(base.inferences / max(o.inferences, 1), 2),
        o.renewals,
        o.leases,
        round(o.records / max(o.inferences, 1), 3),
        round(o.hits / max(o.reads, 1), 5),
        round(o.top1 / max(o.reads, 1), 5),
        round(o.top3 / max(o.reads, 1), 5),
    ]


def _renewal_figures(
    pol: Outcome, whole: Outcome, devices: int, seconds: int, conditions: str
) -> list[Figure]:
    """What keeping answers valid costs, leases against whole renewals (same events, reads)."""
    rpi, rpi_w = pol.records / max(pol.inferences, 1), whole.records / max(whole.inferences, 1)
    cond = f"profile noisy, policy defaults; {conditions}"
    return [
        Figure(
            "records_per_inference",
            round(rpi, 3),
            "ratio",
            f"whole renewals: {rpi_w:.3f} (hit ratio {whole.hits / max(whole.reads, 1):.5f}, "
            f"top-1 {whole.top1 / max(whole.reads, 1):.5f})",
            f"records published to the predictions topic (answers + validity leases) per "
            f"inference; {cond}",
        ),
        Figure(
            "records_per_inference_whole_renewals",
            round(rpi_w, 3),
            "ratio",
            "PRECAST_WORKER__RENEWAL=whole, the same events and reads",
            cond,
        ),
        Figure(
            "records_vs_whole_renewals",
            round(whole.records / max(pol.records, 1), 2),
            "ratio",
            "records with whole renewals / records with leases",
            cond,
        ),
        Figure(
            "audit_bytes_per_device_hour",
            _per_device_hour(pol, devices, seconds),
            "bytes",
            f"whole renewals: {_per_device_hour(whole, devices, seconds):,.0f}",
            f"the audit log's SQLite file (a leaf per record, checkpoints aside) per device and "
            f"hour of the run; {cond}",
        ),
        Figure(
            "audit_bytes_per_device_hour_whole_renewals",
            _per_device_hour(whole, devices, seconds),
            "bytes",
            "PRECAST_WORKER__RENEWAL=whole, the same events and reads",
            cond,
        ),
    ]


def _per_device_hour(o: Outcome, devices: int, seconds: int) -> float:
    return round(o.audit_bytes / devices / (seconds / 3600), 0)


def run(ctx: Context) -> Report:
    model = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    devices, seconds, read_rate = (500, 20, 20.0) if ctx.quick else (2_000, 60, 50.0)
    conditions = (
        f"{devices} devices, 1 heartbeat/s each for {seconds} s (virtual clock), Zipf(1.1) reads "
        f"at {read_rate:.0f}/s + a paging operator (25 rows per 2 s, next page prefetched), "
        f"hot = read in the last {HOT_FOR_MS // 1000} s; horizon 5 s; reads of the first "
        f"{WARMUP_MS // 1000} s not counted; model {model.version}"
    )
    rows, figures = [], []
    default = PolicyConfig()
    for profile in ("noisy", "steady", "iid"):
        progress(f"speculation: profile {profile}: every-event vs policy ...")
        arms: dict[str, PolicyConfig | tuple[PolicyConfig, LeaseConfig]] = {
            "every event": PolicyConfig(every_event=True),
            "policy": default,
        }
        if profile == "noisy":  # main's renewals beside the leases, on the same events and reads
            arms["whole renewals"] = (default, WHOLE)
        res = simulate(
            profile,
            arms,
            model,
            devices=devices,
            seconds=seconds,
            read_rate=read_rate,
            audit=("policy", "whole renewals") if profile == "noisy" else (),
        )
        base, pol = res["every event"], res["policy"]
        name = f"policy (safety {default.safety:g}, hot {default.hot_safety:g})"
        rows.append(_row(profile, "every event", base, base))
        rows.append(_row(profile, name + ", leases", pol, base))
        suffix = "" if profile == "noisy" else f"_{profile}"
        if profile == "noisy":
            whole = res["whole renewals"]
            rows.append(_row(profile, name + ", whole renewals", whole, base))
            figures += _renewal_figures(pol, whole, devices, seconds, conditions)
        figures += [
            Figure(
                f"speculation_inference_savings{suffix}",
                round(base.inferences / max(pol.inferences, 1), 2),
                "ratio",
                "predict-on-every-event inferences / policy inferences",
                f"profile {profile}; {conditions}",
            ),
            Figure(
                f"speculation_hit_ratio{suffix}",
                round(pol.hits / max(pol.reads, 1), 5),
                "ratio",
                f"every event: {base.hits / max(base.reads, 1):.5f}",
                f"profile {profile}; reads served a valid precomputed answer; {conditions}",
            ),
            Figure(
                f"speculation_top1_agreement{suffix}",
                round(pol.top1 / max(pol.reads, 1), 5),
                "ratio",
                f"every event: {base.top1 / max(base.reads, 1):.5f}",
                f"profile {profile}; served top-1 == fresh inference on newest data at read "
                f"time; {conditions}",
            ),
            Figure(
                f"speculation_top3_agreement{suffix}",
                round(pol.top3 / max(pol.reads, 1), 5),
                "ratio",
                f"every event: {base.top3 / max(base.reads, 1):.5f}",
                f"profile {profile}; served top-3 set == fresh top-3 set; {conditions}",
            ),
        ]
    progress("speculation: the safety curve on the noisy profile ...")
    curve = {f"safety {c:g}, hot 2": PolicyConfig(safety=c) for c in (0.25, 0.5, 1, 2)}
    curve |= {f"safety 0.5, hot {h:g}": PolicyConfig(hot_safety=h) for h in (1, 4)}
    curve["safety 0.5, hot 2, hot top-K guarded"] = PolicyConfig(hot_top_k=True)
    res = simulate(
        "noisy",
        {"every event": PolicyConfig(every_event=True), **curve},
        model,
        devices=devices,
        seconds=seconds,
        read_rate=read_rate,
    )
    base = res.pop("every event")
    for name, o in res.items():
        rows.append(_row("noisy (curve)", name, o, base))
    return Report(
        "Speculation: policy vs predict-on-every-event, same events and reads (`python -m bench "
        "speculation`)",
        [
            "profile",
            "policy",
            "heartbeats",
            "inferences",
            "inferences/event",
            "savings",
            "republished",
            "leases",
            "records/inference",
            "hit ratio",
            "top-1 agreement",
            "top-3 agreement",
        ],
        rows,
        figures,
        [
            conditions,
            "savings = every-event inferences / this policy's; agreement over all reads (a miss serves "
            "the fallback, compared like any answer)",
            "republished = answers published again without an inference (renewals; with leases also "
            "the last record of a device that stopped sending); records = every record on the "
            "predictions topic (answers and leases), each an audit leaf, a store write and a board "
            "update; leases: one per partition and second (1 partition here)",
            "whole renewals = PRECAST_WORKER__RENEWAL=whole (main's way: every stable answer "
            "published again before its horizon); audit bytes = the SQLite log (precast.audit) "
            "holding a leaf per record, measured on disk",
        ],
    )
