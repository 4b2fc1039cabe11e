"""CPU time of a process, and of each of its threads by name, from /proc: what the benchmarks
report as CPU per event (it hardly moves with other work on the machine, unlike wall time)."""

from __future__ import annotations

import os
import time


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process, all its threads (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError, IndexError):
        return 0.0


def descendants(pid: int | None) -> list[int]:
    """The live processes `pid` started, and theirs (a read API replica's gate process)."""
    found: list[int] = []
    todo = [pid] if pid else []
    while todo:
        parent = todo.pop()
        try:
            for t in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                found += kids
                todo += kids
        except OSError:
            continue
    return found


def tree_cpu_s(pid: int | None) -> float:
    """`cpu_s` of a process and every live process it started: a replica with its gate."""
    return cpu_s(pid) + sum(cpu_s(k) for k in descendants(pid))


def thread_cpu_s(pid: int | None) -> dict[str, float]:
    """CPU seconds per thread name of a process (librdkafka names its threads rdk:*)."""
    out: dict[str, float] = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf(
                "SC_CLK_TCK"
            )
    except (OSError, TypeError, IndexError):
        pass
    return out


def wait_until_quiet(pid: int | None, busy: float = 0.15, limit_s: float = 30.0) -> None:
    """Wait until `pid` uses less than `busy` of a core over a second (at most `limit_s`)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        c0 = cpu_s(pid)
        time.sleep(1.0)
        if cpu_s(pid) - c0 < busy:
            return


def cores_jiffies(cpus: str) -> tuple[int, int]:
    """(busy, total) clock ticks so far of the CPUs listed in `cpus` ("1" or "1,2,3"), from
    /proc/stat: two readings give how busy those cores were between them, whatever ran there."""
    want = {f"cpu{c}" for c in cpus.split(",")}
    busy = total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *ticks = line.split()
            if name in want:
                t = [int(x) for x in ticks[:8]]  # user nice system idle iowait irq softirq steal
                total += sum(t)
                busy += sum(t) - t[3] - t[4]
    return busy, total
