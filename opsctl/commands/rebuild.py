"""`precast rebuild`: load the shared serving store (Redis) from the compacted predictions topic.

Writes go through the store's newest-wins compare-and-set, so a rebuild is safe while API
replicas write too, and purge markers on the topic come back as purge markers (a purged
prediction stays purged). `--wipe` empties the store first (a clean rebuild; reads miss until
the load has passed their device); it deletes, so it acts only with `--yes` and otherwise says
what it would delete (Redis, the key prefix, how many entries) and stops."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from precast.telemetry.progress import table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wipe", action="store_true", help="delete every stored prediction first (with --yes)"
    )
    parser.add_argument("--yes", action="store_true", help="with --wipe: really delete them")
    parser.add_argument("--no-progress", action="store_true")


def rebuild(
    settings: StackCliSettings, *, wipe_first: bool = False, progress: bool = True
) -> dict[str, Any]:
    from opsctl.toolkit.serving_store import (  # the Redis client loads only here
        PredictionReader,
        shared_store,
    )
    from precast.serving import EXPIRED, FUTURE, OLDER, STORED

    store = shared_store(settings, "rebuild")
    t0 = time.monotonic()
    wiped = store.clear() if wipe_first else 0
    reader = PredictionReader(settings, "rebuild", progress)
    results: Counter[int] = Counter()
    purge_markers = 0
    for items in reader:
        res = store.put_many_if_newer(items)
        results.update(res)
        purge_markers += sum(
            1 for (_d, e), r in zip(items, res, strict=True) if r == STORED and e.purge
        )
    leases = store.put_leases(list(reader.leases.values()))  # after every entry, as served
    store.mark_loaded()
    return {
        "topic": reader.topic,
        "records": reader.records,
        "stored": results[STORED],
        "older": results[OLDER],
        "expired": results[EXPIRED],
        "future": results[FUTURE],
        "invalid": reader.invalid,
        "tombstones": reader.tombstones,
        "purge_markers": purge_markers,
        "leases": leases.count(STORED),
        "wiped": wiped,
        "elapsed_s": time.monotonic() - t0,
    }


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    if args.wipe and not args.yes:
        from opsctl.toolkit.serving_store import predictions_topic, shared_store

        store = shared_store(settings, "rebuild")
        topic = predictions_topic(settings)[0]
        print(
            f"dry run: --wipe would delete {store.count():,} stored predictions from Redis "
            f"(prefix {settings.redis.key_prefix!r}, {settings.redis.url.split('@')[-1]}) and "
            f"reload them from {topic}; reads that go to Redis miss until the load passes "
            "their device. Nothing deleted: add --yes to do it"
        )
        return 0
    r = rebuild(settings, wipe_first=args.wipe, progress=not args.no_progress)
    print(
        f"rebuilt the serving store (Redis, prefix {settings.redis.key_prefix!r}) from {r['topic']}"
        + (f" after deleting {r['wiped']:,} entries" if args.wipe else "")
    )
    print(
        table(
            [
                "records read",
                "stored",
                "older or duplicate",
                "expired",
                "future",
                "purge markers",
                "leases",
                "invalid",
                "tombstones",
            ],
            [
                [
                    r["records"],
                    r["stored"],
                    r["older"],
                    r["expired"],
                    r["future"],
                    r["purge_markers"],
                    r["leases"],
                    r["invalid"],
                    r["tombstones"],
                ]
            ],
        )
    )
    rate = r["records"] / r["elapsed_s"] if r["elapsed_s"] > 0 else 0.0
    print(
        f"{r['records']:,} records in {r['elapsed_s']:.2f}s ({rate:,.0f} rec/s)"
        + (
            "; invalid records are dead-lettered by the API materializers, not here"
            if r["invalid"]
            else ""
        )
    )
    return 0


COMMAND = Command(
    "rebuild",
    help="rebuild the shared serving store from the predictions topic",
    description=__doc__,
    arguments=arguments,
    run=run,
)
