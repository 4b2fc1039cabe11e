"""`precast lag`: how far each consumer group is behind, per partition, in records and in time,
and how fresh the served predictions are.

Time lag is the age of the oldest record a group has not consumed yet (the record at its
committed offset): what an SRE means by "the workers are 40 s behind"."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit import escape
from opsctl.toolkit.filters import split_list
from opsctl.toolkit.freshness import add_freshness_args, freshness
from opsctl.toolkit.reader import range_consumer
from precast.kafka import Admin, TopicPartitionOffset
from precast.telemetry.progress import table


@dataclass
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int
    end: int
    lag: int
    lag_s: float | None  # age of the oldest unconsumed record; None when nothing is behind


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--group",
        action="append",
        help="only these consumer groups (default: every group with offsets)",
    )
    parser.add_argument("--topic", action="append", help="only these topics")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    parser.add_argument(
        "--watch", type=float, metavar="SECONDS", help="repeat every SECONDS until Ctrl-C"
    )
    add_freshness_args(parser)


def oldest_unconsumed_ts(
    settings: StackCliSettings, parts: list[TopicPartitionOffset], timeout_s: float = 5.0
) -> dict[tuple[str, int], int]:
    """Timestamp of the record at each given offset (the first one a group has not consumed)."""
    if not parts:
        return {}
    c = range_consumer(settings.kafka, "lag")
    out: dict[tuple[str, int], int] = {}
    try:
        c.assign(parts)
        deadline = time.monotonic() + timeout_s
        want = {(p.topic, p.partition) for p in parts}
        while want - out.keys() and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                tp = (m.topic(), m.partition())
                if tp in want and tp not in out:
                    out[tp] = m.timestamp()[1]
                    c.pause([TopicPartitionOffset(*tp)])
    finally:
        c.close()
    return out


def measure(
    settings: StackCliSettings, groups: list[str], topics: list[str]
) -> tuple[list[PartitionLag], dict]:
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    infos = {g.group_id: g for g in admin.consumer_groups()}
    names = [g for g in (groups or sorted(infos)) if not g.startswith("precast-ops-")]
    rows: list[tuple[str, TopicPartitionOffset]] = []
    for g in names:
        for tp in admin.committed_offsets(g):
            if topics and tp.topic not in topics:
                continue
            rows.append((g, tp))
    ends = admin.end_offsets(sorted({(tp.topic, tp.partition) for _g, tp in rows}))
    behind: dict[tuple[str, int], set[int]] = {}
    for _g, tp in rows:
        if ends[(tp.topic, tp.partition)] > tp.offset:
            behind.setdefault((tp.topic, tp.partition), set()).add(tp.offset)
    # A consumer reads each partition at one offset, so groups at different offsets of the
    # same partition take several rounds (rarely more than two).
    stamps_at: dict[tuple[str, int, int], int] = {}
    ordered = {tp: sorted(offs) for tp, offs in behind.items()}
    for k in range(max((len(o) for o in ordered.values()), default=0)):
        parts = [
            TopicPartitionOffset(t, p, offs[k]) for (t, p), offs in ordered.items() if len(offs) > k
        ]
        for (t, p), ts in oldest_unconsumed_ts(settings, parts).items():
            stamps_at[(t, p, ordered[(t, p)][k])] = ts
    now = int(time.time() * 1000)
    out = []
    for g, tp in rows:
        end = ends[(tp.topic, tp.partition)]
        stamp = stamps_at.get((tp.topic, tp.partition, tp.offset))
        out.append(
            PartitionLag(
                g,
                tp.topic,
                tp.partition,
                tp.offset,
                end,
                max(0, end - tp.offset),
                None if end <= tp.offset or stamp is None else max(0.0, (now - stamp) / 1000),
            )
        )
    states = {
        g: {"state": infos[g].state, "members": infos[g].members} for g in names if g in infos
    }
    return out, states


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}s" if v < 120 else f"{v / 60:.1f}min" if v < 7200 else f"{v / 3600:.1f}h"


def report(args: argparse.Namespace, settings: StackCliSettings) -> None:
    lags, states = measure(settings, split_list(args.group), split_list(args.topic))
    fresh = freshness(args, settings)
    if args.json:
        print(
            json.dumps(
                {
                    "at_ms": int(time.time() * 1000),
                    "groups": states,
                    "partitions": [asdict(x) for x in lags],
                    "freshness": {k: v for k, v in fresh.items() if k != "lines"},
                }
            )
        )
        return
    if not lags:
        print(
            "no consumer group has committed offsets" + (" on those topics" if args.topic else "")
        )
    else:
        summary: dict[str, tuple[int, float | None]] = {}  # group -> (lag, max lag time)
        for x in lags:
            n, t = summary.get(x.group, (0, None))
            if x.lag_s is not None:
                t = max(t or 0.0, x.lag_s)
            summary[x.group] = (n + x.lag, t)
        print(
            table(
                ["group", "state", "members", "lag", "max lag time"],
                escape.rows(  # group names are any client's choice
                    [
                        g,
                        states.get(g, {}).get("state", "?"),
                        states.get(g, {}).get("members", 0),
                        n,
                        _fmt_s(t),
                    ]
                    for g, (n, t) in sorted(summary.items())
                ),
            )
        )
        print()
        print(
            table(
                ["group", "topic", "partition", "committed", "end", "lag", "lag time"],
                escape.rows(
                    [x.group, x.topic, x.partition, x.committed, x.end, x.lag, _fmt_s(x.lag_s)]
                    for x in lags
                ),
            )
        )
    for line in fresh.get("lines", []):
        print(line)  # numbers and topic names only, no record content


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    if args.watch is not None and args.watch <= 0:
        from precast.errors import ConfigError

        raise ConfigError(f"--watch needs a positive number of seconds, got {args.watch:g}")
    while True:
        report(args, settings)
        if args.watch is None:
            return 0
        time.sleep(args.watch)
        print()


COMMAND = Command(
    "lag",
    help="consumer lag per group and partition (records and time), prediction freshness",
    description=__doc__,
    arguments=arguments,
    run=run,
)
