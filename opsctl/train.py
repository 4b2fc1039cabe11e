"""`precast train` and `precast model bind`: the workers' training entry points, run as
processes (opsctl never imports an application; docs/architecture.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    tr = sub.add_parser(
        "train",
        help="train a model for the fleet spec: --simulate ROWS or --data FILE, --version V",
        add_help=False,
    )
    tr.add_argument("rest", nargs=argparse.REMAINDER)
    tr.set_defaults(fn=_train)


def _train(args: argparse.Namespace, settings: Any) -> int:
    cmd = [sys.executable, "-m", "workers.training.train", *args.rest]
    return subprocess.call(cmd)
