"""`precast purge SELECTOR`: invalidate served predictions of some model versions.

It finds the newest entry per device whose model version the selector matches (semver-aware,
`precast.models.versions`), writes a purge marker for each to the predictions topic (so the
compacted topic, every replica's view and any rebuild keep them purged), waits until the
markers are acknowledged, and then deletes the entries from the shared store (compare-and-
delete: an entry a newer prediction replaced meanwhile is kept), and last purges the edge
caches of PRECAST_EDGE__PURGE_URLS by surrogate key (a line's `ml:` key, else each matched
version's `mv:` key: precast.edge_cache.keys), so a copy the edge fetches again is the
fallback. A newer real prediction later wins over the marker as usual. `--schedule` repeats
it (e.g. daily at 04:00 UTC).

Without `--yes` it is a dry run: it prints what it would touch (the predictions topic, each
matching version with its device count and when it last produced an answer, the store, the
edge keys) and writes nothing."""

from __future__ import annotations

import argparse
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit.ranges import format_time
from opsctl.toolkit.schedule import parse_schedule, run_forever
from precast.edge_cache.keys import purge_keys
from precast.edge_cache.purge import EdgePurge
from precast.errors import ConfigError, PrecastError
from precast.kafka import Producer
from precast.models.versions import Selector, parse_selector, parse_version
from precast.telemetry.progress import bar, table
from schemas.predictions import PredictionSet

if TYPE_CHECKING:  # the store (Redis client) loads only when a purge runs
    from precast.serving import Entry

log = logging.getLogger("opsctl.purge")

PURGED = MetricCounter("precast_purge_entries_total", "served predictions purged", ["selector"])
RUNS = MetricCounter("precast_purge_runs_total", "purge runs", ["selector", "result"])
LAST_OK = Gauge(
    "precast_purge_last_success_timestamp_seconds", "end of the last successful purge", ["selector"]
)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "selector", help="a line (1.3, v1.3.), an exact version (=1.3.7) or a range (>=1.2 <1.4)"
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="do it: write the purge markers and delete the entries (without it: a dry run)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be purged per version; change nothing (the default without --yes)",
    )
    parser.add_argument(
        "--source",
        choices=["store", "topic"],
        help="where to find served entries: the shared store (default with PRECAST_REDIS__URL) "
        "or the predictions topic (default without)",
    )
    parser.add_argument(
        "--schedule", help="repeat: cron in UTC ('0 4 * * *') or daily@HH:MM; runs until stopped"
    )
    parser.add_argument("--no-progress", action="store_true")


@dataclass
class PurgeResult:
    selector: str
    source: str
    scanned: int = 0
    unparseable: int = 0
    by_version: Counter[str] = field(default_factory=Counter)
    newest_ms: dict[str, int] = field(default_factory=dict)  # newest produced_at per version
    topic: str = ""
    markers: int = 0
    deleted: int = 0
    edge_urls: list[str] = field(default_factory=list)
    edge_keys: list[str] = field(default_factory=list)  # surrogate keys purged at the edge
    edge_purged: int = 0  # cached copies the edge nodes said they dropped
    edge_errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


def marker(device_id: str, e: Entry, now_ms: int) -> bytes:
    """The superseding record of docs/architecture.md: same data time, later production time,
    no candidates, trigger "purge"."""
    return (
        PredictionSet(
            device_id=device_id,
            candidates=[],
            model_version=e.model_version,
            computed_at_ms=e.computed_at_ms,
            # as long as the purged entry could be served: its own validity or, when validity
            # leases may extend it, the end of its terms (schemas.leases)
            valid_until_ms=max(e.keep_until_ms, e.computed_at_ms),
            produced_at_ms=max(now_ms, e.produced_at_ms + 1),
            trigger="purge",
        )
        .model_dump_json()
        .encode()
    )


def find(entries: Any, sel: Selector, result: PurgeResult) -> dict[str, Entry]:
    """The entries to purge: real predictions (not markers) whose version the selector takes."""
    victims: dict[str, Entry] = {}
    verdict: dict[str, bool] = {}  # few distinct versions: parse each once
    for device_id, e in entries:
        result.scanned += 1
        if e.purge:
            continue
        hit = verdict.get(e.model_version)
        if hit is None:
            hit = verdict[e.model_version] = sel.matches(e.model_version)
            if parse_version(e.model_version) is None:
                result.unparseable += 1
        if hit:
            victims[device_id] = e
            result.by_version[e.model_version] += 1
            v = e.model_version
            result.newest_ms[v] = max(result.newest_ms.get(v, 0), e.produced_at_ms)
    return victims


def purge(
    settings: StackCliSettings, sel: Selector, *, dry_run: bool, source: str | None, progress: bool
) -> PurgeResult:
    from opsctl.toolkit.serving_store import predictions_topic, shared_store, topic_view

    t0 = time.monotonic()
    source = source or ("store" if settings.redis.url else "topic")
    store = (
        shared_store(settings, "purge --source store")
        if source == "store" or settings.redis.url
        else None
    )
    result = PurgeResult(str(sel), source)
    entries = (
        store.iterate()
        if source == "store" and store is not None
        else topic_view(settings, progress).iterate()
    )
    victims = find(entries, sel, result)
    result.topic = predictions_topic(settings)[0]
    result.edge_urls = list(settings.edge.purge_urls)
    result.edge_keys = purge_keys(sel, list(result.by_version)) if result.edge_urls else []
    if dry_run or not victims:
        if not dry_run:
            _purge_edge(settings, result)
        result.elapsed_s = time.monotonic() - t0
        return result
    topic = result.topic
    producer = Producer(settings.kafka)
    now = int(time.time() * 1000)
    pb = bar(len(victims), "purge markers", enabled=progress)
    for i, (device_id, e) in enumerate(victims.items()):
        producer.produce(topic, device_id.encode(), marker(device_id, e, now))
        if i % 1000 == 999:
            producer.poll(0)
            pb.update(1000)
    producer.flush(120)  # markers durable before anything is deleted; raises otherwise
    pb.close()
    result.markers = len(victims)
    if store is not None:
        keys = {d: e.key for d, e in victims.items()}
        result.deleted = store.purge(lambda d, e: keys.get(d) == e.key)
    _purge_edge(settings, result)
    result.elapsed_s = time.monotonic() - t0
    PURGED.labels(str(sel)).inc(result.markers)
    return result


def _purge_edge(settings: StackCliSettings, result: PurgeResult) -> None:
    """Last, after the store: a copy the edge fetches again now gets the fallback. The keys
    select at the edge exactly what the selector selected in the store (precast.edge_cache)."""
    if not result.edge_keys:
        return
    edge = EdgePurge(settings.edge, "purge")
    try:
        report = edge.purge(result.edge_keys)
    finally:
        edge.close()
    result.edge_purged = report.purged
    result.edge_errors = [f"{n.url}: {n.error}" for n in report.nodes if n.error]


def _version_order(text: str) -> tuple[int, Any]:
    v = parse_version(text)
    return (0, v) if v is not None else (1, text)


def _print(r: PurgeResult, dry_run: bool) -> None:
    total = sum(r.by_version.values())
    now = int(time.time() * 1000)

    def newest(v: str) -> str:
        at = r.newest_ms.get(v)
        if not at:
            return "-"
        return format_time(at) + (" (answering now?)" if now - at < 60_000 else "")

    rows = [
        [v, n, newest(v)]
        for v, n in sorted(r.by_version.items(), key=lambda kv: _version_order(kv[0]))
    ]
    head = "dry run: would purge" if dry_run else "purged"
    print(
        f"{head} {total:,} served predictions matching {r.selector!r} (of {r.scanned:,} entries in the {r.source})"
    )
    if rows:
        # A version that produced an answer moments ago is probably what the workers serve now.
        print(table(["model version", "devices", "newest answer produced"], rows))
    if r.unparseable:
        print(f"{r.unparseable} stored version(s) are not semantic versions and were never matched")
    if dry_run and total:
        store = " and delete them from the shared store (Redis)" if r.source == "store" else ""
        print(f"nothing written; with --yes: {total:,} purge markers to {r.topic}{store}")
    if not dry_run and total:
        print(
            f"{r.markers:,} purge markers written to the predictions topic; "
            f"{r.deleted:,} entries deleted from the shared store; {r.elapsed_s:.2f}s"
        )
    if r.edge_keys:
        keys = " ".join(r.edge_keys)
        nodes = ", ".join(r.edge_urls)
        if dry_run:
            print(f"edge: with --yes, purge keys {keys} at {nodes}")
        elif not r.edge_errors:
            print(f"edge: purged keys {keys} at {nodes}: {r.edge_purged:,} cached copies dropped")


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    sel = parse_selector(args.selector)
    dry = args.dry_run or not args.yes
    if args.schedule is None:
        result = purge(
            settings, sel, dry_run=dry, source=args.source, progress=not args.no_progress
        )
        _print(result, dry)
        if result.edge_errors:
            # The store is purged; the edge keeps its copies until their validity ends, or
            # until the API replicas' own purges follow the markers.
            raise PrecastError("edge purge failed at " + "; ".join(result.edge_errors))
        return 0
    if dry and not args.dry_run:
        raise ConfigError("a scheduled purge acts on its own: add --yes (or --dry-run to watch)")
    expr = parse_schedule(args.schedule)
    probe = None
    if settings.metrics.port:
        from precast.telemetry.endpoints import ProbeServer

        probe = ProbeServer(settings.metrics.host, settings.metrics.port).start()

    def job() -> None:
        try:
            result = purge(settings, sel, dry_run=dry, source=args.source, progress=False)
            _print(result, dry)
            if result.edge_errors:
                raise PrecastError("edge purge failed at " + "; ".join(result.edge_errors))
            RUNS.labels(str(sel), "ok").inc()
            LAST_OK.labels(str(sel)).set(time.time())
        except Exception as exc:  # noqa: BLE001 - the schedule goes on; the failure is counted and logged
            RUNS.labels(str(sel), "failed").inc()
            log.error("scheduled purge of %r failed: %s", str(sel), exc)

    try:
        run_forever(
            expr,
            job,
            lambda due: print(
                f"next purge of {str(sel)!r} at {format_time(int(due * 1000))} "
                f"(schedule {expr!r}, UTC)",
                flush=True,
            ),
        )
    finally:
        if probe:
            probe.stop()
    return 0


COMMAND = Command(
    "purge",
    help="invalidate served predictions by model version (semver-aware)",
    description=__doc__,
    arguments=arguments,
    run=run,
)
