"""`precast fleet check | schema | show`: write a fleet spec and know it is right before anything
runs on it (docs/fleets.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from opsctl.commands.base import Action, Command
from opsctl.settings import StackCliSettings
from precast.errors import ConfigError

EXIT_PROBLEMS = 2


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path)


def _schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", nargs="?", type=Path, help="file to write (default: stdout)")


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", nargs="?", type=Path, help="default: PRECAST_FLEET__SPEC, else built-in"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object, for tools")


def _check(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from schemas.spec import check, context_hash, feature_hash

    spec, problems = check(args.file)
    if problems or spec is None:
        for p in problems:
            print(f"{args.file}: {p}")
        print(f"{args.file}: {len(problems)} problem{'s' * (len(problems) != 1)}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(
        f"{args.file}: ok: {spec.fleet.name} v{spec.fleet.version}, {len(spec.streams)} streams, "
        f"{len(spec.context)} context values, {len(spec.features)} features "
        f"({len(spec.feature_names)} columns), {len(spec.labels)} labels; "
        f"features {feature_hash(spec)[:12]}, context {context_hash(spec)[:12]}"
    )
    return 0


def _schema(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from schemas.spec import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
    print(args.out)
    return 0


def _show(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from precast.fleet import load_fleet

    fleet = load_fleet(args.file or settings.fleet.spec)
    spec, fm = fleet.spec, fleet.features
    if args.json:
        print(json.dumps(_described(fleet), indent=2))
        return 0
    print(f"fleet {fleet.describe()}: {spec.fleet.description}")
    for name, s in spec.streams.items():
        print(
            f"  stream {name} (topic {s.topic}): {len(s.fields)} fields, trigger {s.trigger}, undeclared {s.undeclared}"
        )
    for name, c in spec.context.items():
        print(f"  context {name}: {c.kind} over {c.stream}")
    print(f"  features ({fm.width} columns, feature hash {fm.hash}):")
    for i, n in enumerate(fm.names):
        print(f"    {i:>3} {n}")
    print(
        f"  labels: {', '.join(spec.labels)} (default {spec.serving.default_label}, top {spec.serving.top_k})"
    )
    print(f"  context hash {fleet.context.hash}")
    return 0


def _described(fleet: Any) -> dict[str, Any]:
    """What `show` prints, as data: the fields a tool needs to build or check rows for it."""
    spec, fm = fleet.spec, fleet.features
    return {
        "name": spec.fleet.name,
        "version": spec.fleet.version,
        "description": spec.fleet.description,
        "streams": {
            name: {
                "topic": s.topic,
                "trigger": s.trigger,
                "undeclared": s.undeclared,
                "fields": {f: field.kind for f, field in s.fields.items()},
            }
            for name, s in spec.streams.items()
        },
        "context": {n: {"kind": c.kind, "stream": c.stream} for n, c in spec.context.items()},
        "features": list(fm.names),
        "standardized": list(fm.standardized),
        "labels": list(spec.labels),
        "default_label": spec.serving.default_label,
        "top_k": spec.serving.top_k,
        "feature_hash": fm.hash,
        "context_hash": fleet.context.hash,
    }


COMMAND = Command(
    "fleet",
    help="fleet specs: check one, export the spec's JSON Schema, show one",
    action_dest="fleet_action",
    actions=(
        Action(
            "check",
            help="every problem of a spec file, with its path; exit 2 if any",
            run=_check,
            arguments=_check_arguments,
        ),
        Action(
            "schema",
            help="the spec file's JSON Schema (for editors and TOML tools)",
            run=_schema,
            arguments=_schema_arguments,
        ),
        Action(
            "show",
            help="what a spec declares and derives: streams, features, hashes",
            run=_show,
            arguments=_show_arguments,
        ),
    ),
)
