"""`precast train` and `precast model bind`: the workers' training entry points, run as
processes (opsctl never imports an application; docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys

from opsctl.commands.base import Command

PASS_THROUGH = {"train": "workers.training.train", "model bind": "workers.training.bind"}


# Listed for `precast --help`; `precast train ARGS` is handed to the trainer as it is
# (opsctl.cli.main), so its own --help and errors are the trainer's.
TRAIN = Command(
    "train",
    help="train a model for the fleet spec: --version V and --simulate ROWS, --data FILE or "
    "--dataset DIR (see precast train --help)",
    add_help=False,
)
MODEL = Command("model", help="model bind FOLDER: bind a model trained elsewhere to the fleet spec")


def pass_through(argv: list[str]) -> int | None:
    """Run `precast train ...` as the trainer's own process; None for other commands."""
    for words, module in PASS_THROUGH.items():
        n = len(words.split())
        if argv[:n] == words.split():
            return subprocess.call([sys.executable, "-m", module, *argv[n:]])
    return None
