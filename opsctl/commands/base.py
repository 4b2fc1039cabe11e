"""What every `precast` subcommand is (as faust's `cli.base.Command` is for `faust`): a name and
the one line `precast --help` lists, the arguments it declares, and the function that runs it.
A command with actions (`precast audit prove`) declares one `Action` each instead of a run.

The registry (`opsctl.commands.registry()`) lists them; `opsctl.cli` builds the parser from it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opsctl.settings import StackCliSettings

Run = Callable[[argparse.Namespace, StackCliSettings], int]
Arguments = Callable[[argparse.ArgumentParser], None]


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """For a command or action that takes no arguments."""


@dataclass(frozen=True)
class Action:
    """One action of a command (`precast deadletters list`): its own arguments and run."""

    name: str
    help: str
    run: Run
    arguments: Arguments = no_arguments


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: Arguments = no_arguments
    # None only for the commands `opsctl.cli.main` hands to another process before parsing.
    run: Run | None = None
    description: str | None = None
    raw_description: bool = False  # print the description with its own line breaks
    add_help: bool = True
    actions: tuple[Action, ...] = ()
    # Where the chosen action's name lands in the parsed arguments (`args.action`).
    action_dest: str = "action"

    def register(self, sub: Any) -> argparse.ArgumentParser:
        """Add this command (and its actions) to the `precast` subparsers `sub`."""
        options: dict[str, Any] = {"help": self.help, "add_help": self.add_help}
        if self.description is not None:
            options["description"] = self.description
        if self.raw_description:
            options["formatter_class"] = argparse.RawDescriptionHelpFormatter
        parser: argparse.ArgumentParser = sub.add_parser(self.name, **options)
        self.arguments(parser)
        if self.run is not None:
            parser.set_defaults(fn=self.run)
        if self.actions:
            acts = parser.add_subparsers(dest=self.action_dest, required=True)
            for action in self.actions:
                ap = acts.add_parser(action.name, help=action.help)
                action.arguments(ap)
                ap.set_defaults(fn=action.run)
        return parser
