"""`precast train`, `precast distill`, `precast quantize` and `precast model bind`: the workers'
training entry points, run as processes (opsctl never imports an application;
docs/architecture.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys

from opsctl.commands.base import Action, Command
from opsctl.settings import StackCliSettings

PASS_THROUGH = {
    "train": "workers.training.train",
    "distill": "workers.training.distill",
    "quantize": "workers.training.quantize",
    "model bind": "workers.training.bind",
}


def _handed(args: argparse.Namespace, settings: StackCliSettings) -> int:
    raise AssertionError("handed to the trainer's process before parsing")  # pragma: no cover


# Listed for `precast --help`; `precast train ARGS` is handed to the trainer as it is
# (opsctl.cli.main), so its own --help and errors are the trainer's.
TRAIN = Command(
    "train",
    help="train a model for the fleet spec: --version V and --simulate ROWS, --data FILE or "
    "--dataset DIR (see precast train --help)",
    add_help=False,
)
DISTILL = Command(
    "distill",
    help="a small MLP trained on a registry version's soft labels, as a registry candidate: "
    "--teacher V --version V2 (see precast distill --help; docs/models.md)",
    add_help=False,
)
QUANTIZE = Command(
    "quantize",
    help="a registry version quantized with ONNX Runtime (dynamic, static, fp16), as a "
    "registry candidate: V --version V2 (see precast quantize --help; docs/models.md)",
    add_help=False,
)
MODEL = Command(
    "model",
    help="models trained elsewhere: model bind FOLDER binds one to the fleet spec, checked as "
    "the worker checks it",
    action_dest="model_action",
    actions=(
        Action(
            "bind",
            help="bind a model folder (model.onnx + manifest.json) to the fleet spec "
            "(see precast model bind --help; docs/models.md)",
            run=_handed,
        ),
    ),
)


def pass_through(argv: list[str]) -> int | None:
    """Run `precast train ...` as the trainer's own process; None for other commands."""
    for words, module in PASS_THROUGH.items():
        n = len(words.split())
        if argv[:n] == words.split():
            return subprocess.call([sys.executable, "-m", module, *argv[n:]])
    return None
