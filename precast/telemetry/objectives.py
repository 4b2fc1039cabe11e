"""What an operator is called in for, from the UI's beacons (issue 26): two measures kept apart,
their objectives and the rule that names an origin. Shared by the read API (the board's banner)
and `precast observe generate` (the Prometheus rules), so the banner and the alert are one rule.

- *wait*: what a person waits for between an input and the answer on screen. Its origins:
  `network_qoe` (the request on the network), `front_jank` (the page's own time), `read` (the
  server's own time for the read), `db_lock` (the read waiting for the store: the Redis round
  trip, or the in-process view's lookup), `edge` (an edge cache's own time for the request, when
  one is in front: its Server-Timing `edge` entry, less the server's read on a miss; on a hit the
  server did nothing), and on a miss `model` (the fallback was shown; the wait until the
  computed answer replaced it: the precompute request and the inference).
- *age*: how old the shown answer's data is. Its origins: `queue` (the event waiting for a
  worker), `model` (the worker's inference), `kafka` (the prediction in Kafka until the
  materializer read it) and `cache` (the answer held by the store until the read). In a
  precompute system `cache` is most of an answer's life, by design: age shares say where an
  answer's age came from, they are not something people wait for, and nothing alerts on them.

The rule (docs/observability.md): an origin whose share of the wait over the last
`RECENT_S` is above `SHARE_THRESHOLD` *and* either was below it over the `BASELINE_S` before
(it rose past it), or whose wait per view grew `GROWTH` times its baseline (an origin that
already held most of the wait got much slower), *while* the wait's p95 over the last
`RECENT_S` is above `WAIT_OBJECTIVE_S`. Six shares that sum to one always leave one large; a
share alone says nothing, a share that changed while people wait too long says where to look.
"""

from __future__ import annotations

WAIT_ORIGINS = ("network_qoe", "front_jank", "read", "db_lock", "edge", "model")
AGE_ORIGINS = ("queue", "model", "kafka", "cache")

SHARE_THRESHOLD = 0.30
RECENT_S = 600  # "its share over the last 10 minutes"
BASELINE_S = 3 * 3600  # "... while over the 3 hours before that it was below the threshold"
GROWTH = 2.0  # an origin already above the threshold: its wait per view doubled
QUANTILE = 0.95
# p95 input -> shown. 500 ms is the boundary above which web.dev's Interaction to Next Paint
# (the same measure: an input to the next frame that shows its result) rates an interaction
# "poor"; an answer is served in about a millisecond, so above it the page, the network or a
# miss is what people wait for.
WAIT_OBJECTIVE_S = 0.5
# p95 age of the answers people are shown. 5 s is the workers' default horizon
# (PRECAST_WORKER__HORIZON_S): an answer older than its horizon is past valid_until and shown
# marked stale. More than 5 % of what people look at being past it means the precompute does
# not keep up with what is read. Deployments with another horizon set this with it.
AGE_OBJECTIVE_S = 5.0
# Histogram bounds (ms) of the per-client distributions behind the quantiles; each objective
# is a bound, so "p95 above the objective" is decided exactly, not interpolated.
BOUNDS_MS = (
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    35.0,
    50.0,
    75.0,
    100.0,
    150.0,
    200.0,
    300.0,
    400.0,
    500.0,
    700.0,
    1_000.0,
    1_500.0,
    2_000.0,
    3_000.0,
    4_000.0,
    5_000.0,
    7_500.0,
    10_000.0,
    20_000.0,
    60_000.0,
)
assert WAIT_OBJECTIVE_S * 1000 in BOUNDS_MS and AGE_OBJECTIVE_S * 1000 in BOUNDS_MS


def rising(
    share: float, baseline_share: float | None, per_view_s: float, baseline_per_view_s: float | None
) -> bool:
    """The rule's origin test: above the threshold now, and below it before or much slower now.
    Without a baseline (a replica or a board that just started) nothing is rising."""
    if share <= SHARE_THRESHOLD or baseline_share is None or baseline_per_view_s is None:
        return False
    return baseline_share < SHARE_THRESHOLD or per_view_s > GROWTH * baseline_per_view_s
