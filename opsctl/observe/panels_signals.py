"""The dashboard of what operators wait for and how old what they are shown is (issue 26):
the two measures in two rows, never mixed, with each objective beside its p95."""

from __future__ import annotations

from opsctl.observe.panels import P, W, q
from precast.telemetry.objectives import AGE_OBJECTIVE_S, SHARE_THRESHOLD, WAIT_OBJECTIVE_S

_WAIT = (
    "Wait (input to answer shown): network_qoe, front_jank, read, db_lock, edge, model on a miss"
)
_AGE = "Age of the answers shown: queue, model, kafka, cache (time in the store)"

SIGNALS: dict[str, tuple[str, dict[str, list[P]]]] = {
    "precast-signals": (
        "precast / what operators wait for",
        {
            _WAIT: [
                P(
                    "p95 input -> shown (objective dashed)",
                    (
                        q("avg(precast_wait_p95_seconds)", "p95"),
                        q(f"vector({WAIT_OBJECTIVE_S:g})", "objective"),
                    ),
                    "s",
                    description="One weight per UI client (60 s half-life). The page "
                    "PrecastWaitOriginRising needs it above the objective.",
                ),
                P(
                    "Share of the wait by origin",
                    (q("avg by (origin) (precast_wait_origin_share)", "{{origin}}"),),
                    "percentunit",
                    description="Median over clients. One share is always large; what "
                    f"alerts is one rising past {SHARE_THRESHOLD:.0%} from below it "
                    "(docs/observability.md).",
                ),
                P(
                    "Wait per view by origin",
                    (q("avg by (origin) (precast_wait_origin_per_view_seconds)", "{{origin}}"),),
                    "s",
                    description="Median over clients of each client's mean per view.",
                ),
                P(
                    "Reported wait by origin (raw, all beacons)",
                    (
                        q(
                            f"sum by (origin) (rate(precast_wait_origin_seconds_total[{W}]))",
                            "{{origin}}",
                        ),
                    ),
                    "s",
                    description="Volume as sent (clipped): one client can send many; "
                    "alerts use the per-client figures above.",
                ),
                P(
                    "UI clients reporting",
                    (q("sum(precast_beacon_clients)", "clients"),),
                    stat=True,
                ),
            ],
            _AGE: [
                P(
                    "p95 age of the answers shown (objective dashed)",
                    (
                        q("avg(precast_age_p95_seconds)", "p95"),
                        q(f"vector({AGE_OBJECTIVE_S:g})", "objective"),
                    ),
                    "s",
                ),
                P(
                    "Share of the age by origin",
                    (q("avg by (origin) (precast_age_origin_share)", "{{origin}}"),),
                    "percentunit",
                    description="cache (time in the store) is most of a precomputed answer's "
                    "life by design; nothing alerts on these shares.",
                ),
                P(
                    "Reported age by origin (raw, all beacons)",
                    (
                        q(
                            f"sum by (origin) (rate(precast_age_origin_seconds_total[{W}]))",
                            "{{origin}}",
                        ),
                    ),
                    "s",
                ),
            ],
        },
    ),
}
