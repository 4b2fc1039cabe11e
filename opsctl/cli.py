"""`precast`: the local stack, topic contracts and the end-to-end demo.

precast stack up | down [kafka|redis] | status | running | install
precast topics ensure | list
precast demo
precast schemas export DIR
precast fleet check FILE | schema | show           (fleet specs, docs/fleets.md)
precast train --version V --simulate ROWS | --data FILE
precast observe generate | check   (alert rules and dashboards as code, docs/observability.md)
precast replay | backfill | shadow | deadletters | purge | lag | rebuild   (SRE tools, docs/sre.md)
precast dataset build | show, precast promote   (learn from outcomes, docs/sre.md)
precast audit checkpoint | prove | verify                       (audit log, docs/audit.md)

One module per command under opsctl/commands/ (the registry lists them); this module only
builds the parser from them and runs the chosen one.
"""

from __future__ import annotations

import argparse
import sys

from opsctl.commands import registry
from opsctl.commands.trainer import pass_through
from opsctl.settings import StackCliSettings
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="precast", description="precast operations CLI")
    sub = p.add_subparsers(dest="command", required=True)
    for command in registry():
        command.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    handed = pass_through(sys.argv[1:] if argv is None else argv)
    if handed is not None:
        return handed
    args = build_parser().parse_args(argv)

    def body() -> int:
        settings = load(StackCliSettings)
        setup_logging(settings.log_level)
        return args.fn(args, settings)

    return run_cli("precast", body, one_line_bugs=True)


if __name__ == "__main__":
    sys.exit(main())
