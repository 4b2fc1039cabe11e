"""How fresh the served predictions are: per served entry (shared store) the age of the data it
was computed from, and per partition of the predictions topic when it was last written."""

from __future__ import annotations

import argparse
import time
from typing import Any

from opsctl.settings import StackCliSettings
from opsctl.toolkit.ranges import OffsetRange
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.kafka import Admin
from precast.telemetry.progress import table


def add_freshness_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--no-freshness", action="store_true", help="skip the predictions freshness report"
    )
    ap.add_argument(
        "--sample",
        type=int,
        default=100_000,
        help="most served entries read for the freshness figures (default 100000)",
    )


def _pct(sorted_vals: list[float], q: float) -> float:
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def topic_freshness(settings: StackCliSettings) -> dict[str, Any]:
    """Seconds since each partition of the predictions topic was last written."""
    from opsctl.toolkit.serving_store import predictions_topic  # loads the store only when used

    topic, parts = predictions_topic(settings)
    ends = Admin(settings.kafka).end_offsets([(topic, p) for p in range(parts)])
    # The last few offsets: the very last one can be a transaction marker, not a record.
    ranges = [OffsetRange(p, max(0, ends[(topic, p)] - 20), ends[(topic, p)]) for p in range(parts)]
    last: dict[int, int] = {}
    c = range_consumer(settings.kafka, "freshness")
    try:
        for msgs in RangeReader(c, topic, ranges, idle_timeout_s=5.0):
            for m in msgs:
                last[m.partition()] = max(last.get(m.partition(), 0), m.timestamp()[1])
    finally:
        c.close()
    now = int(time.time() * 1000)
    return {
        "topic": topic,
        "last_write_age_s": {p: (now - ts) / 1000 for p, ts in sorted(last.items())},
        "empty_partitions": [p for p in range(parts) if p not in last],
    }


def store_freshness(settings: StackCliSettings, sample: int) -> dict[str, Any]:
    """Over the served entries: how old their data is, how many are past valid_until or purged."""
    from opsctl.toolkit.serving_store import shared_store

    store = shared_store(settings, "freshness")
    leases = store.lease_book()  # entries as reads serve them: extended under leases
    now = int(time.time() * 1000)
    ages, stale, purged, n = [], 0, 0, 0
    for d, e in store.iterate():
        n += 1
        if e.purge:
            purged += 1
        else:
            e = leases.resolve(d, e)
            x = e.extension
            ages.append((now - (e.computed_at_ms if x is None else x.certified_at_ms)) / 1000)
            stale += e.valid_until_ms <= now
        if n >= sample:
            break
    ages.sort()
    out: dict[str, Any] = {
        "entries": n,
        "purge_markers": purged,
        "past_valid_until": stale,
        "sampled": n >= sample,
    }
    if ages:
        out |= {
            "age_p50_s": _pct(ages, 0.5),
            "age_p99_s": _pct(ages, 0.99),
            "age_max_s": ages[-1],
            "age_min_s": ages[0],
        }
    return out


def freshness(args: argparse.Namespace, settings: StackCliSettings) -> dict[str, Any]:
    if args.no_freshness:
        return {}
    out: dict[str, Any] = {"topic": topic_freshness(settings)}
    if settings.redis.url:
        out["store"] = store_freshness(settings, args.sample)
    out["lines"] = _lines(out)
    return out


def _lines(f: dict[str, Any]) -> list[str]:
    t = f["topic"]
    lines = ["", f"predictions freshness ({t['topic']})"]
    ages = t["last_write_age_s"]
    if ages:
        stalest = max(ages, key=ages.get)
        lines.append(
            f"  topic: last written {min(ages.values()):.1f}s ago; stalest partition {stalest}, "
            f"last written {ages[stalest]:.1f}s ago"
            + (
                f"; never written: partitions {t['empty_partitions']}"
                if t["empty_partitions"]
                else ""
            )
        )
    else:
        lines.append("  topic: no predictions yet")
    s = f.get("store")
    if s is not None:
        if s.get("age_p50_s") is None:
            lines.append(f"  store: {s['entries']:,} entries, none serving a prediction")
        else:
            lines.append(
                table(
                    [
                        "  served entries",
                        "data age p50",
                        "p99",
                        "max",
                        "past valid_until",
                        "purge markers",
                    ],
                    [
                        [
                            f"  {s['entries']:,}" + (" (sample)" if s["sampled"] else ""),
                            f"{s['age_p50_s']:.1f}s",
                            f"{s['age_p99_s']:.1f}s",
                            f"{s['age_max_s']:.1f}s",
                            s["past_valid_until"],
                            s["purge_markers"],
                        ]
                    ],
                )
            )
    return lines
