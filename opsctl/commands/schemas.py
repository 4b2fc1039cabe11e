"""`precast schemas export DIR`: the event contracts as JSON Schema files (docs/events.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from precast.errors import ConfigError


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["export"])
    parser.add_argument("dir", help="folder to write <role>.v<version>.schema.json files into")


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    import orjson

    from schemas.export import json_schemas
    from schemas.spec import load_spec

    out = Path(args.dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, schema in json_schemas(load_spec(settings.fleet.spec)).items():
            (out / name).write_bytes(
                orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
            )
            print(out / name)
    except OSError as exc:
        raise ConfigError(f"cannot write schemas to {out}: {exc.strerror}") from None
    return 0


COMMAND = Command(
    "schemas",
    help="event contracts as JSON Schema (docs/events.md)",
    arguments=arguments,
    run=run,
)
