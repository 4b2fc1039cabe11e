"""What every precast entry point shares: logging setup and one-line failures."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import NoReturn

from precast.errors import PrecastError


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # librdkafka chatter (connection retries) is useful only when debugging.
    logging.getLogger("precast.kafka.librdkafka").setLevel(
        max(logging.getLevelName(level), logging.WARNING)
    )


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """Run an entry point: a `PrecastError` becomes `prog: message` and its exit code, Ctrl-C
    exits 130, and nothing prints a traceback for a condition we expected."""
    try:
        return body()
    except PrecastError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (plus exit 2) instead of the usage
    block; `--help` still prints everything. Subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
