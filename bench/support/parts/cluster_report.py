"""The cluster benchmark's report: rows and figures from the leader kills, the scale-out and
the soak that bench.benchmarks.bench_cluster ran."""

from __future__ import annotations

from bench.support.harness import Figure, Report


def _s(x: float | None) -> str:
    return "none in 90 s" if x is None else f"{x:.2f}"


def report(
    kills: list[dict],
    one: float,
    three: float,
    backlog: int,
    soaks: list[dict | None],
    *,
    kill_rate: int,
) -> Report:
    rows: list[list] = []
    figures: list[Figure] = []
    if kills:
        worst = max(kills, key=lambda k: k["recovery_s"] if k["recovery_s"] is not None else 1e9)
        for k in kills:
            n = f"leader kill {k['run']} (broker {k['victim']}"
            n += ", also active controller)" if k["victim"] == k["controller"] else ")"
            rows += [
                [
                    f"{n}: events sent / refused / lost, achieved rate",
                    f"{k['sent']} / {k['refused']} / {k['lost_events']}, {k['rate']:,.0f}/s",
                ],
                [f"{n}: triggers without a prediction", k["lost_triggers"]],
                [
                    f"{n}: s to leaders moved / inputs readable / answers (led, all partitions)",
                    f"{_s(k['leaders_moved_s'])} / {_s(k['inputs_back_s'])} / "
                    f"{_s(k['recovery_s'])}, {_s(k['recovery_all_s'])}",
                ],
                [f"{n}: longest stretch without any prediction (s)", round(k["answers_gap_s"], 2)],
                [
                    f"{n}: workers that lost their partitions (group session ran out)",
                    k["lost_assignments"],
                ],
                [
                    f"{n}: stalled (answers past 10 s) / longest stretch without progress (s)",
                    f"{k.get('stalled') or 'none'} / "
                    + ", ".join(f"{st} {_s(v)}" for st, v in k.get("stood_still_s", {}).items()),
                ],
            ]
        lost = sum(k["lost_events"] + k["lost_triggers"] + k["refused"] for k in kills)
        rec = worst["recovery_s"] if worst["recovery_s"] is not None else float("nan")
        rates = ", ".join(f"{k['rate']:,.0f}" for k in kills)
        recs = ", ".join(_s(k["recovery_s"]) for k in kills)
        kill_cond = (
            f"3 KRaft brokers (RF 3, min ISR 2, broker session timeout 3 s), 2 worker processes, "
            f"{kill_rate:,} heartbeats/s asked (achieved {rates}/s) for {worst['seconds']} s, "
            f"kill -9 9 s in of the leader of the busiest partitions (the last run: of the active "
            f"controller), restarted once answers flowed again; {len(kills)} run(s), 2 cores"
        )
        figures += [
            Figure(
                "cluster_leader_kill_lost_events",
                lost,
                "events",
                "0 (issue target)",
                kill_cond + "; lost events + lost triggers + refused sends, all runs",
            ),
            Figure(
                "cluster_leader_kill_recovery_s",
                round(rec, 2),
                "s",
                "<= 10 (issue target)",
                kill_cond + f"; the worst run (runs: {recs} s): kill to the first prediction of "
                "an event created after the kill on every partition the victim led",
            ),
        ]
    if one == one and three == three:  # both measured (not NaN)
        rows += [
            ["scale-out: 1 worker drains (events/s)", round(one)],
            ["scale-out: 3 workers drain (events/s)", round(three)],
        ]
        figures.append(
            Figure(
                "scale_out_events_per_s_3_vs_1_workers",
                round(three / one, 3),
                "ratio",
                "1 worker process, same run",
                f"backlog of {backlog} heartbeats written after the workers were ready, "
                f"6 partitions, 2 shared cores ({round(one)} vs {round(three)} events/s)",
            )
        )
    for run in soaks:
        if run is not None:
            _soak_rows(run, rows, figures)
    return Report(
        title="Cluster: 3 KRaft brokers, Redis Cluster, faults and scale-out",
        columns=["measure", "value"],
        rows=rows,
        figures=figures,
        notes=[
            "Leader kill: each run on fresh topics; times from the kill -9: leaders moved = no "
            "partition names the victim as leader or in-sync replica (it was fenced); inputs "
            "readable = a heartbeat created after the kill read back on every partition; answers "
            "= a prediction of such an event on every partition the victim led, and on all.",
            "Stalled: when answers took longer than 10 s, the first stage along the path that "
            "stood still for 5 s or more (brokers: until leaders moved; bench load: its "
            "heartbeats arriving; worker consume: "
            "records read; worker produce: loops waiting for the broker to take their outputs; "
            "API reader: prediction records an API replica read; bench reader: its predictions "
            "tail), from samples every 250 ms (bench/support/parts/cluster_stalls.py).",
            "Every process of the soak is listed with its RSS at the end and its growth.",
            "A private stack in a scratch home on free ports; the shared stack is not touched.",
        ],
    )


def _soak_rows(soak: dict, rows: list, figures: list) -> None:
    one = soak["cores"] == 1
    tag = "soak on one core" if one else "soak"
    worst_p = max(soak["growth"], key=soak["growth"].get)
    rows += [
        [f"{tag}: worst RSS growth after warm-up ({worst_p})", f"{soak['growth'][worst_p]:.1f} %"],
        [
            f"{tag}: largest worker lag after warm-up (records; samples unread)",
            f"{soak['max_lag']:,} ({soak['lag_unread']})",
        ],
        [
            f"{tag}: events sent / lost, achieved rate",
            f"{soak['sent']} / {soak['lost_events']}, {soak['rate']:,.0f}/s",
        ],
        [f"{tag}: triggers without a prediction", soak["lost_triggers"]],
        [f"{tag}: API reads ok / errors", f"{soak['reads']['ok']} / {soak['reads']['errors']}"],
    ]
    rows += [
        [f"{tag} RSS at end: {k}", f"{mb:.0f} MB ({soak['growth'][k]:+.1f} %)"]
        for k, mb in soak["rss_mb"].items()
    ]
    for k, h in soak.get("heap", {}).items():
        if h:
            rows.append(
                [
                    f"{tag}: {k} heap change (Python blocks; malloc in use, free)",
                    f"{h.get('python_blocks', 0):+,.0f}; {h.get('malloc_in_use', 0) / 2**20:+.1f} MB, "
                    f"{h.get('malloc_free', 0) / 2**20:+.1f} MB",
                ]
            )
    cores = "every process pinned to one core (taskset)" if one else f"{soak['cores']} cores"
    cond = (
        f"{soak['seconds']} s soak, warm-up {soak['warmup']} s, {soak['asked']:,} heartbeats/s "
        f"asked (achieved {soak['rate']:,.0f}/s), 3 brokers, 2 workers, 2 API replicas over "
        f"a 6-node Redis Cluster, {cores}; growth = mean RSS of the last quarter vs the first "
        "sample after warm-up, worst process"
    )
    figures.append(
        Figure(
            "soak_rss_growth_pct_one_core" if one else "soak_rss_growth_pct",
            round(soak["growth"][worst_p], 2),
            "%",
            "<= 10 (issue target)",
            cond + f" ({worst_p})",
        )
    )
