"""`precast deadletters list | inspect | export | redrive`: look at rejected records by reason,
write them to a file, and send selected ones back to where they came from after a fix.

Dead letters follow `schemas.deadletters`: original key, value and headers byte for byte plus
`dlq.*` headers (reason, detail, component, source topic/partition/offset/timestamp); a
truncated letter holds only a preview of a long value (list marks it, export and inspect say so
in `truncated`, redrive leaves it)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from opsctl.commands import redrive
from opsctl.commands.base import Action, Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit import escape
from opsctl.toolkit.deadletter_select import dead_letter_topic, selected
from opsctl.toolkit.ranges import OffsetRange, add_range_args, format_time
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.deadletter import (
    dead_letter_info,
    is_truncated,
    original_headers,
    original_key,
    preview_of,
)
from precast.errors import ConfigError
from precast.hygiene import printable
from precast.kafka import KafkaMessage
from precast.telemetry.progress import table


def _selection_arguments(parser: argparse.ArgumentParser) -> None:
    """Which dead letters list, export and redrive read."""
    parser.add_argument(
        "--topic",
        help="dead-letter topic (default: the catalog's, from PRECAST_TOPICS__PREFIX)",
    )
    parser.add_argument(
        "--reason", action="append", help="only these reasons (repeat or comma-separate)"
    )
    parser.add_argument(
        "--component", action="append", help="only those rejected by these components"
    )
    parser.add_argument(
        "--source-topic", action="append", help="only those rejected from these topics"
    )
    parser.add_argument("--device", action="append", help="only these device IDs (original keys)")
    add_range_args(parser, "dead letters")
    parser.add_argument("--no-progress", action="store_true")


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    _selection_arguments(parser)
    parser.add_argument("--limit", type=int, default=50, help="most records shown (newest last)")


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    _selection_arguments(parser)
    parser.add_argument("--out", required=True, help="JSONL file to write ('-' for stdout)")


def _redrive_arguments(parser: argparse.ArgumentParser) -> None:
    _selection_arguments(parser)
    redrive.add_args(parser)


def _inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("where", metavar="PARTITION:OFFSET")
    parser.add_argument("--topic", help="dead-letter topic (default: the catalog's)")


def _value_cell(m: KafkaMessage, info: dict[str, str]) -> str:
    """The value's size, and for a truncated letter what it kept of how much."""
    value = m.value()
    cut = preview_of(value, info)
    if cut is not None:
        return f"cut: {cut.kept:,} of {'?' if cut.size is None else f'{cut.size:,}'} B"
    return "(null)" if value is None else f"{len(value):,} B"


def _row(m: KafkaMessage, info: dict[str, str]) -> list[Any]:
    key = original_key(m.key(), m.headers())
    rejected = info.get("rejected_at_ms", "")
    source = f"{info.get('source.topic', '?')}[{info.get('source.partition', '?')}]@{info.get('source.offset', '?')}"
    return [  # every cell from the record's own bytes escaped (precast.hygiene.printable)
        f"{m.partition()}:{m.offset()}",
        format_time(int(rejected)) if rejected.isascii() and rejected.isdigit() else "-",
        printable(info.get("reason", "-"), 40),
        printable(info.get("component", "-"), 40),
        printable(source, 120),
        "(none)" if key is None else printable(key.decode(errors="replace"), 40),
        _value_cell(m, info),
        printable(info.get("detail", ""), 60),
    ]


def run_list(args: argparse.Namespace, settings: StackCliSettings) -> int:
    if args.limit < 0:
        raise ConfigError(f"--limit must be 0 or more, got {args.limit}")
    by_reason: Counter[tuple[str, str]] = Counter()
    shown: list[list[Any]] = []
    truncated = 0
    for m, info in selected(args, settings, "list"):
        by_reason[(info.get("reason", "-"), info.get("component", "-"))] += 1
        truncated += is_truncated(info)
        shown.append(_row(m, info))
        if len(shown) > args.limit:
            shown.pop(0)
    total = sum(by_reason.values())
    print(f"{total:,} dead letters match")
    if total:
        print(
            table(
                ["reason", "component", "count"],
                escape.rows([r, c, n] for (r, c), n in by_reason.most_common()),
            )
        )
        if truncated:
            print(
                f"{truncated:,} of them truncated (value column 'cut'): the letter holds a preview, "
                "the full record stays at its source offset; redrive leaves them"
            )
        print()
        print(
            table(
                ["at", "rejected", "reason", "component", "source", "key", "value", "detail"],
                shown,
            )
        )
        if total > len(shown):
            print(f"(the last {len(shown)} of {total:,}; --limit shows more, export writes all)")
    return 0


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def to_json(m: KafkaMessage, info: dict[str, str]) -> dict[str, Any]:
    """A lossless JSON form: bytes as base64, plus the value as text when it is UTF-8."""
    value = m.value()
    try:
        text = value.decode() if value is not None else None
    except UnicodeDecodeError:
        text = None
    headers = m.headers()
    cut = preview_of(value, info)
    return {
        "partition": m.partition(),
        "offset": m.offset(),
        "timestamp_ms": m.timestamp()[1],
        "key_b64": _b64(original_key(m.key(), headers)),
        "value_b64": _b64(value),
        "value_text": text,
        "headers": [[k, _b64(v)] for k, v in original_headers(headers)],
        "dead_letter": info,
        # not None: value_b64 is only a preview of the record (what was cut, where it is whole)
        "truncated": None if cut is None else printable(cut.describe(), 400),
    }


def run_export(args: argparse.Namespace, settings: StackCliSettings) -> int:
    n = 0
    if args.out == "-":
        for m, info in selected(args, settings, "export"):
            sys.stdout.write(json.dumps(to_json(m, info)) + "\n")
            n += 1
        print(f"exported {n:,} dead letters", file=sys.stderr)
        return 0
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ConfigError(f"cannot write {out}: folder {out.parent} does not exist")
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "w") as f:
        for m, info in selected(args, settings, "export"):
            f.write(json.dumps(to_json(m, info)) + "\n")
            n += 1
    os.replace(tmp, out)  # a failed export leaves no half file under the real name
    print(f"exported {n:,} dead letters to {out}")
    return 0


def run_inspect(args: argparse.Namespace, settings: StackCliSettings) -> int:
    p, _, off = args.where.partition(":")
    if not (p.isdigit() and off.isdigit()):
        raise ConfigError(
            f"malformed position {args.where!r}: expected PARTITION:OFFSET, e.g. 0:42"
        )
    topic, parts = dead_letter_topic(args, settings)
    if int(p) >= parts:
        raise ConfigError(f"partition {p} does not exist: {topic} has partitions 0-{parts - 1}")
    c = range_consumer(settings.kafka, "inspect")
    try:
        ranges = [OffsetRange(int(p), int(off), int(off) + 1)]
        low, high = c.watermarks(topic, int(p))
        if not low <= int(off) < high:
            raise ConfigError(
                f"no dead letter at {topic} {p}:{off} (partition {p} holds offsets {low}-{high - 1})"
            )
        found = [m for msgs in RangeReader(c, topic, ranges) for m in msgs]
    finally:
        c.close()
    if not found:
        raise ConfigError(f"no dead letter at {topic} {p}:{off}")
    doc = to_json(found[0], dead_letter_info(found[0].headers()))
    doc["key_text"] = (
        None
        if doc["key_b64"] is None
        else base64.b64decode(doc["key_b64"]).decode(errors="replace")
    )
    print(json.dumps(doc, indent=2))
    return 0


COMMAND = Command(
    "deadletters",
    help="list, inspect, export and redrive dead letters",
    description=__doc__,
    actions=(
        Action(
            "list",
            help="counts by reason and the newest records",
            run=run_list,
            arguments=_list_arguments,
        ),
        Action(
            "export",
            help="write records to a JSONL file",
            run=run_export,
            arguments=_export_arguments,
        ),
        Action(
            "redrive",
            help="send selected dead letters back to their source topic",
            run=redrive.run,
            arguments=_redrive_arguments,
        ),
        Action(
            "inspect",
            help="one dead letter in full: PARTITION:OFFSET",
            run=run_inspect,
            arguments=_inspect_arguments,
        ),
    ),
)
