"""Shared benchmark plumbing: the local stack, a table printer, BENCHMARKS.md and results.json.

A benchmark module defines `NAME`, `DESCRIPTION` and `run(ctx) -> Report`. Every run rewrites its
own section of BENCHMARKS.md (between markers) and merges its figures into bench/results.json.
Text outside the markers is the authors': the targets table at the top and each figure's history
after its section's end marker survive every run (and a run never updates them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.support.procstat import descendants

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results.json"
MARKDOWN = ROOT / "BENCHMARKS.md"


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    baseline: str
    conditions: str


@dataclass
class Report:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # A partial run's own BENCHMARKS.md section (e.g. "cluster:soak1"), so it does not replace
    # the whole run's; its figures merge into results.json like any others.
    section: str | None = None


@dataclass
class Context:
    bootstrap_servers: str
    redis_url: str
    quick: bool

    def unique(self, stem: str) -> str:
        return f"bench.{stem}.{uuid.uuid4().hex[:8]}"

    def kafka_settings(self, **kw: Any):
        from precast.settings import KafkaSettings

        return KafkaSettings(bootstrap_servers=self.bootstrap_servers, **kw)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def render_table(columns: list[str], rows: list[list[Any]], markdown: bool = False) -> str:
    cells = [columns] + [[_fmt(c) for c in r] for r in rows]
    if markdown:  # a literal | inside a cell would split it
        cells = [[c.replace("|", "\\|") for c in r] for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join(
        [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells[1:])]
    )


def machine() -> str:
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"


def record(name: str, command: str, report: Report) -> None:
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = [
        f"### {report.title}",
        "",
        f"`{command}` — {today}, {machine()}",
        "",
        render_table(report.columns, report.rows, markdown=True),
        "",
    ]
    if report.figures:
        body += ["| figure | value | unit | baseline |", "|---|---|---|---|"]
        body += [
            f"| `{f.name}` | {_fmt(f.value)} | {f.unit} | {f.baseline.replace('|', chr(92) + '|')} |"
            for f in report.figures
        ]
        body.append("")
    body += [f"- {n}" for n in report.notes]
    section = (
        f"<!-- bench:{name}:start -->\n" + "\n".join(body).rstrip() + f"\n<!-- bench:{name}:end -->"
    )
    text = MARKDOWN.read_text() if MARKDOWN.exists() else _HEADER
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)}:start -->.*?<!-- bench:{re.escape(name)}:end -->", re.S
    )
    text = (
        pattern.sub(lambda _: section, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + section + "\n"
    )
    MARKDOWN.write_text(text)

    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for f in report.figures:
        results[f.name] = {
            "value": f.value,
            "unit": f.unit,
            "baseline": f.baseline,
            "conditions": f"{f.conditions}; {machine()}; {today}",
        }
    RESULTS.write_text(json.dumps(dict(sorted(results.items())), indent=2) + "\n")


_HEADER = """# Benchmarks

Measured with `python -m bench NAME` (or `./dev bench NAME`) against the local stack on the
machine named in each section. Each run rewrites its own section (between its markers; the
targets' history after the end marker is kept) and merges its figures into
`bench/results.json`. The machine is small (2 cores) and shared, so figures are side-by-side
ratios from one run rather than absolute promises.
"""


def progress(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def app_env(bootstrap_servers: str, topics: Any, partitions: int, **extra: str) -> dict[str, str]:
    """The environment of a precast process a benchmark starts over its own topic catalog."""
    return {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(partitions),
        "PRECAST_LOG_LEVEL": "WARNING",
        **extra,
    }


def stop_processes(procs: list[Any], timeout_s: float = 30.0) -> None:
    """TERM every process still running, then wait for each; one that does not stop is killed."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout_s)
        except Exception:  # noqa: BLE001 - a stuck child is killed
            p.kill()


def listener_pid(port: int) -> int | None:
    """The process listening on a local TCP port (the broker of the shared stack)."""
    out = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True
    ).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


def pin(
    pid: int | None,
    cpus: str,
    *,
    with_children: bool = False,
    only_children: bool = False,
    one_thread: bool = False,
) -> None:
    """Every thread of a process onto `cpus` (threads started later inherit the mask); with
    `with_children`, of the processes it started too (a read API replica and its gate); with
    `only_children`, of those alone; with `one_thread`, `pid` is one thread's ID, moved alone."""
    if not pid:
        return
    if one_thread:
        subprocess.run(["taskset", "-cp", cpus, str(pid)], capture_output=True)
        return
    mine = [] if only_children else [pid]
    for p in [*mine, *(descendants(pid) if with_children or only_children else ())]:
        subprocess.run(["taskset", "-a", "-cp", cpus, str(p)], capture_output=True)


PIN_BROKER_ENV = "PRECAST_BENCH_PIN_BROKER"  # 0: leave a shared broker on every core


@contextlib.contextmanager
def on_one_core(bootstrap_servers: str, enabled: bool = True) -> Iterator[bool]:
    """Inside: this process (and so every child it starts) and the local broker on CPU 0, the
    slower machine of issue 27; yields whether the broker was pinned. Restored on the way out."""
    if not enabled:
        yield False
        return
    broker = listener_pid(int(bootstrap_servers.rsplit(":", 1)[1]))
    pin_broker = os.environ.get(PIN_BROKER_ENV, "1") != "0"
    everything = f"0-{(os.cpu_count() or 1) - 1}"
    pin(os.getpid(), "0")
    if pin_broker:
        pin(broker, "0")
    try:
        yield pin_broker
    finally:
        pin(os.getpid(), everything)
        if pin_broker:
            pin(broker, everything)
