"""`precast observe generate | check`: the SLO rules and Grafana dashboards as code
(opsctl/observe/), written under deploy/ or checked for being up to date."""

from __future__ import annotations

import argparse
import sys

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["generate", "check"])


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from opsctl.observe.render import DEPLOY, stale, write

    if args.action == "check":
        old = stale()
        for path in old:
            print(f"out of date: {path.relative_to(DEPLOY.parent)}")
        if old:
            print("run: precast observe generate", file=sys.stderr)
        return 1 if old else 0
    written = write()
    for path in written:
        print(f"wrote {path.relative_to(DEPLOY.parent)}")
    print(f"{len(written)} files changed" if written else "everything up to date")
    return 0


COMMAND = Command(
    "observe",
    help="SLO rules and Grafana dashboards: write them under deploy/, or check",
    arguments=arguments,
    run=run,
)
