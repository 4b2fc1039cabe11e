"""`precast fleet check | schema | show`: write a fleet spec and know it is right before anything
runs on it (docs/fleets.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
