"""Background work below the read path on a shared core: a thread's CPU priority (nice).

A read API replica serves reads and, in the same process, materializes the predictions topic.
On a busy core every microsecond of the materializer (its Python thread and its Kafka clients'
librdkafka threads) is one a read waits for; at a lower priority the scheduler hands the core to
a read's threads as they wake, and the materializer takes what is left (docs/api.md,
"Reads first"). Linux keeps a nice value per thread and a new thread inherits its creator's,
so a Kafka client built on a lowered thread has all its threads lowered, the broker threads it
starts later included.

Lowering is always allowed; raising a priority back needs CAP_SYS_NICE, which is why a client
is built on a short-lived thread of its own (`built_below`) instead of lowering the caller's.
Where nice does not exist or is refused, the work runs at the usual priority, with one log
line: a priority is a preference, never a reason to fail.

Where the kernel groups processes by session for scheduling (autogroup, on by default on
desktops and plain servers), a thread's nice only ranks it among its own session's threads: a
process that must yield to another one (the read API's gate process) starts a session of its own
and lowers that session's group too (`lower_session`). Inside a container's cgroup there is no
autogroup, and the nice of its threads does the same work.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("precast.priority")

T = TypeVar("T")

MAX_NICE = 19  # Linux's lowest priority

_warned = threading.Event()


def this_thread_nice() -> int:
    """The calling thread's nice value (0 where threads have none)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return 0


def lower_this_thread(nice: int) -> bool:
    """Lower the calling thread to `nice` (0-19) unless it already runs that low; True when it
    now runs at `nice` or lower."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice must be 0-{MAX_NICE}, not {nice}")
    if nice == 0:
        return True
    try:
        if this_thread_nice() < nice:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        return True
    except (AttributeError, OSError) as exc:  # not Linux, or a sandbox that refuses it
        if not _warned.is_set():
            _warned.set()
            log.warning("background work runs at the read path's priority: %s", exc)
        return False


def built_below(nice: int, build: Callable[[], T], name: str = "build-below") -> T:
    """`build()` run on a thread of its own lowered to `nice`: whatever threads it starts (a
    Kafka client's) inherit that priority, and the caller's stays as it was. Its exception,
    if any, is raised here."""
    if nice == 0:
        return build()
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        lower_this_thread(nice)
        try:
            out.append(build())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            failed.append(exc)

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return out[0]


def lower_session(nice: int) -> bool:
    """Lower this process's scheduling group (Linux autogroup: its session's) to `nice`, for a
    process that started a session of its own; True when set. Only lowering is asked for, which
    needs no privilege; where autogroup is off or absent the file is missing or ignored."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice must be 0-{MAX_NICE}, not {nice}")
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
        return True
    except OSError:
        return False
