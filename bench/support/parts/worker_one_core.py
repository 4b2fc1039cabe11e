"""`python -m bench worker` on one core: the passthrough loop and the at-least-once worker over
the same backlog with this process and the broker pinned to CPU 0 (a slower machine: the broker
now takes its share of the same core), and the per-event profile that explains the gap to the
passthrough loop on both CPUs."""

from __future__ import annotations

from collections.abc import Callable

from bench.support.harness import Context, on_one_core, progress


def one_core(
    ctx: Context,
    topics,
    ends: dict[int, int],
    passthrough: Callable[..., tuple[float, float]],
    run_worker: Callable[..., tuple[float, int, dict[str, float]]],
) -> dict:
    with on_one_core(ctx.bootstrap_servers) as pin_broker:
        progress("one core: passthrough loop")
        pt, pt_cpu = passthrough(ctx, topics, ends)
        alo, stages = 0.0, {}
        for rnd in (1, 2):
            progress(f"one core, round {rnd}: worker, at-least-once")
            rate, _preds, st = run_worker(ctx, topics, ends)
            if rate > alo:
                alo, stages = rate, st
    return {
        "passthrough": pt,
        "cpu": pt_cpu,
        "alo": alo,
        "stages": stages,
        "broker_pinned": pin_broker,
    }


def gap_rows(
    label: str, stages: dict[str, float], events: int, passthrough: float, passthrough_cpu: float
) -> list[list]:
    """Microseconds of wall time per event by stage, against the passthrough loop's whole cost
    per event: where the worker's extra time goes. Also CPU per event (this process, every
    thread): unlike wall time it hardly moves with other work on the machine."""
    per = {k: 1e6 * v / events for k, v in stages.items()}
    total, bare, cpu = per.pop("total"), 1e6 / passthrough, per.pop("cpu")
    bare_cpu = 1e6 * passthrough_cpu / events
    rest = total - sum(per.values())
    rows = [
        [
            f"{label}: us per event, worker vs passthrough",
            f"{total:.1f} vs {bare:.1f}",
            f"{bare / total:.3f}",
            f"gap {total - bare:.1f} us",
        ],
        [
            f"{label}: CPU us per event, worker vs passthrough",
            f"{cpu:.1f} vs {bare_cpu:.1f}",
            f"{bare_cpu / cpu:.3f}",
            "process CPU, all threads",
        ],
    ]
    rows += [
        [f"{label}:   {k}", f"{v:.2f} us", f"{100 * v / total:.0f} % of the worker's", "-"]
        for k, v in sorted(per.items(), key=lambda kv: -kv[1])
    ]
    rows.append([f"{label}:   loop (rest)", f"{rest:.2f} us", f"{100 * rest / total:.0f} %", "-"])
    return rows
