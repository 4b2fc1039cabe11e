"""What every precast entry point shares: logging setup and one-line failures."""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from precast.errors import PrecastError
from precast.hygiene import printable
from precast.supervise import Supervised


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # librdkafka chatter (connection retries) is useful only when debugging.
    logging.getLogger("precast.kafka.librdkafka").setLevel(
        max(logging.getLevelName(level), logging.WARNING)
    )


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas for this process, before its threads start; True when set.

    glibc gives each thread that allocates under contention an arena of its own (up to 8 per
    core) and keeps what is freed in it. A process whose librdkafka, consumer and server threads
    all allocate (the read API: materializer, board feed, event loop) then grows its RSS with
    every new high-water mark of any arena, long after its data stopped growing. MALLOC_ARENA_MAX
    in the environment, the operator's word, wins; other C libraries are left alone."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # not glibc
        return False


def trim_malloc_every(interval_s: float = 30.0) -> bool:
    """Hand glibc's free heap pages back to the system every `interval_s`, on a daemon thread;
    True when started. Freed memory inside an arena stays in the process's RSS until it is
    trimmed: after a burst (a lagging consumer catching up) the RSS would keep its high-water
    mark although the data is gone. A trim of a ~200 MB heap takes a few milliseconds."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False

    forever = threading.Event()  # never set: the thread lives as long as the process

    def run() -> None:
        while not forever.wait(interval_s):
            trim(0)

    Supervised("malloc-trim").thread(run, forever).start()  # issue 36: no silent thread death
    return True


def run_cli(prog: str, body: Callable[[], int], *, one_line_bugs: bool = False) -> int:
    """Run an entry point: a `PrecastError` becomes `prog: message` and its exit code, a fleet
    spec that cannot be used its first problem (exit 2), Ctrl-C exits 130, and nothing prints a
    traceback for a condition we expected. `one_line_bugs` (the operator CLIs): anything else is
    one line too, exit 70, with the traceback only under PRECAST_TRACEBACK=1; services keep
    theirs in the log."""
    from schemas.spec import SpecError

    try:
        return body()
    except PrecastError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    except SpecError as exc:  # a fleet spec that cannot be used: its first problem, one line
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `precast ... | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141
    except Exception as exc:  # a bug, not bad input: still one line, the traceback on request
        if not one_line_bugs or os.environ.get("PRECAST_TRACEBACK"):
            raise
        detail = printable(str(exc), 300)
        print(
            f"{prog}: internal error: {type(exc).__name__}: {detail} "
            "(PRECAST_TRACEBACK=1 shows where; please report it)",
            file=sys.stderr,
        )
        return 70  # EX_SOFTWARE


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (plus exit 2) instead of the usage
    block; `--help` still prints everything. Subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
