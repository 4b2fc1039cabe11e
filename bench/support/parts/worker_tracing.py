"""What tracing costs the worker and what it keeps (issue 39), for `bench worker`:

- `tracing_off_worker_ratio`: this tree's worker with tracing off (the SDK installed, the
  `Tracing.off()` checks in place) over main's worker (the tree exported at the commit before
  the tracing spans), each run in a process of its own (bench.support.parts.worker_baseline),
  alternated on the same backlog, the better of each kept.
- `tracing_sampled_worker_ratio`: the same worker in this process with 1 % head sampling on a
  backlog published with 1 % head sampling (so ~1 % of inputs carry a sampled context), spans
  exported over OTLP/HTTP to the stack's Jaeger when it answers, else to a no-op exporter (the
  row says which), over the same worker with tracing off; alternated, the better of each.
- `trace_completeness`: of the answers whose input heartbeat was sampled at publish, the share
  whose batch span was kept, links that publish span and has its inference and produce
  children (in-memory exporters on both sides, the same 1 % sampling)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.support.harness import Context, Figure, progress
from bench.support.parts.worker_run import PARTITIONS, bounded_worker

ROOT = Path(__file__).resolve().parents[3]
RATIO = 0.01
BASELINE_SCRIPT = Path(__file__).with_name("worker_baseline.py")
PAIRS = 5  # alternated runs of main's worker and this one


def traced_backlog(ctx: Context, topics: Any, devices: int, rounds: int) -> dict[int, int]:
    """Heartbeats published by the producer with tracing on at 1 % head sampling; returns the
    sampled publish spans, {trace id: span id}."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from precast.kafka import Producer
    from precast.settings import TracingSettings
    from precast.telemetry.tracing import start_tracing
    from producers.publisher import EventPublisher
    from producers.simulator import Fleet

    exporter = InMemorySpanExporter()
    tracing = start_tracing(
        TracingSettings(enabled=True, sample_ratio=RATIO), "precast-simulator", exporter
    )
    fleet = Fleet(devices, seed=3)
    publisher = EventPublisher(Producer(ctx.kafka_settings()), topics, tracing=tracing)
    t0 = int(time.time() * 1000) - 1000 * rounds  # none in the worker's future
    for r in range(rounds):
        for start in range(0, devices, 2_000):
            for e in fleet.heartbeats(min(2_000, devices - start), t0 + 1000 * r):
                publisher.publish(e)
    publisher.flush()
    spans = {s.context.trace_id: s.context.span_id for s in exporter.get_finished_spans()}
    tracing.shutdown()
    return spans


def _main_tree(tmp: Path) -> tuple[Path, str] | None:
    """main's source tree before the tracing spans, exported (git archive) under `tmp`."""
    ref = os.environ.get("PRECAST_BENCH_TRACING_BASELINE")
    git = ["git", "-C", str(ROOT)]
    try:
        if not ref:
            added = subprocess.run(
                [
                    *git,
                    "log",
                    "--diff-filter=A",
                    "--format=%H",
                    "--",
                    "precast/telemetry/trace_links.py",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            if not added:
                return None
            ref = f"{added[-1]}^"
        sha = subprocess.run(
            [*git, "rev-parse", "--short", ref], capture_output=True, text=True, check=True
        ).stdout.strip()
        archive = tmp / "main.tar"
        subprocess.run([*git, "archive", "-o", str(archive), sha], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp / "main", filter="data")
    except (OSError, subprocess.CalledProcessError, tarfile.TarError):
        return None
    return tmp / "main", sha


def _timed(ctx: Context, tree: Path, topics: Any, ends: dict[int, int]) -> tuple[float, float]:
    """(events/s, CPU seconds) of one bounded run of the worker of `tree`, own process."""
    args = {
        "bootstrap": ctx.bootstrap_servers,
        "prefix": topics.heartbeats.name.removesuffix("heartbeats"),
        "partitions": PARTITIONS,
        "ends": ends,
        "group": ctx.unique("g"),
    }
    out = subprocess.run(
        [sys.executable, "-P", str(BASELINE_SCRIPT), json.dumps(args)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return float(doc["rate"]), float(doc["cpu"])


def _jaeger_endpoint() -> str | None:
    """The OTLP endpoint of the stack's Jaeger when it answers (else None: a no-op exporter)."""
    from opsctl.settings import StackCliSettings
    from precast.settings import load

    stack = load(StackCliSettings).stack
    try:
        url = f"http://127.0.0.1:{stack.jaeger_health_port}/status"
        with urllib.request.urlopen(url, timeout=1) as r:
            if r.status != 200:
                return None
    except OSError:
        return None
    return f"http://127.0.0.1:{stack.jaeger_otlp_port}/v1/traces"


def _sampled_tracing(endpoint: str | None) -> Any:
    from opentelemetry.sdk.trace.export import SpanExportResult

    from precast.settings import TracingSettings
    from precast.telemetry.tracing import start_tracing

    class NoOp:
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            return None

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    if endpoint is not None:
        settings = TracingSettings(enabled=True, sample_ratio=RATIO, endpoint=endpoint)
        return start_tracing(settings, "precast-worker-bench")
    settings = TracingSettings(enabled=True, sample_ratio=RATIO)
    return start_tracing(settings, "precast-worker-bench", NoOp())  # type: ignore[arg-type]


def completeness(
    ctx: Context, topics: Any, ends: dict[int, int], published: dict[int, int]
) -> tuple[float, int]:
    """(share of sampled answers whose trace holds every hop, how many sampled answers)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from precast.settings import TracingSettings
    from precast.telemetry.tracing import parse_traceparent, start_tracing

    exporter = InMemorySpanExporter()
    tracing = start_tracing(
        TracingSettings(enabled=True, sample_ratio=RATIO), "precast-worker", exporter
    )
    w = bounded_worker(ctx, topics, end=ends, tracing=tracing)
    answers: list[tuple[bytes | None, bytes]] = []
    sink_produce = w.output.sink.produce
    predictions = topics.predictions.name

    def produce(topic: str, keys: list[bytes], values: list[bytes], *traceparent: bytes) -> None:
        if topic == predictions:
            answers.extend((traceparent[0] if traceparent else None, v) for v in values)
        sink_produce(topic, keys, values, *traceparent)

    w.output.sink.produce = produce
    w.run()
    w.close()
    spans = exporter.get_finished_spans()
    batches = {s.context.span_id: s for s in spans if s.name == "batch"}
    children: dict[int, set[str]] = {}
    for s in spans:
        if s.parent is not None and s.name in ("inference", "produce"):
            children.setdefault(s.parent.span_id, set()).add(s.name)
    wanted = complete = 0
    hb = topics.heartbeats.name
    for header, value in answers:
        inputs = [
            int(ref["trace_id"], 16)
            for ref in orjson.loads(value).get("lineage", [])
            if ref.get("topic") == hb and ref.get("trace_id")
        ]
        for trace_id in {t for t in inputs if t in published}:
            wanted += 1
            ctx_ = parse_traceparent(header)
            batch = batches.get(ctx_.span_id) if ctx_ is not None else None
            if batch is None:
                continue
            linked = {(link.context.trace_id, link.context.span_id) for link in batch.links}
            if (trace_id, published[trace_id]) in linked and children.get(
                batch.context.span_id, set()
            ) >= {"inference", "produce"}:
                complete += 1
    return (complete / wanted if wanted else 0.0), wanted


def tracing_figures(
    ctx: Context, admin: Any, devices: int, rounds: int, run_worker: Callable[..., tuple]
) -> tuple[list[list[Any]], list[Figure], list[str]]:
    """The rows, figures and notes of the tracing part of `bench worker`."""
    from precast.kafka import Consumer
    from schemas.topics import catalog

    topics = catalog(ctx.unique("tr") + ".", PARTITIONS)
    admin.ensure_topics(list(topics))
    hb = topics.heartbeats.name
    rows: list[list[Any]] = []
    figures: list[Figure] = []
    try:
        progress(f"tracing: publishing {devices * rounds:,} heartbeats with 1 % head sampling")
        published = traced_backlog(ctx, topics, devices, rounds)
        c = Consumer(ctx.kafka_settings(), ctx.unique("wm"))
        ends = {p: c.watermarks(hb, p)[1] for p in range(PARTITIONS)}
        c.close()
        n = sum(ends.values())
        cond = f"{n:,} heartbeats of {devices:,} devices, {PARTITIONS} partitions, one process"
        with tempfile.TemporaryDirectory(prefix="precast-main-") as tmp:
            main = _main_tree(Path(tmp))
            if main is not None:
                tree, sha = main
                # Wall rates on this shared 2-core machine moved by a third within one run, so
                # the figure is CPU per event (the same backlog, pair by pair, A B A B ...):
                # the median of main's CPU seconds over this worker's, each pair side by side.
                mains: list[tuple[float, float]] = []
                offs: list[tuple[float, float]] = []
                for rnd in range(1, PAIRS + 1):
                    progress(f"tracing pair {rnd}/{PAIRS}: main's worker ({sha}), own process")
                    mains.append(_timed(ctx, tree, topics, ends))
                    progress(f"tracing pair {rnd}/{PAIRS}: this worker, tracing off, own process")
                    offs.append(_timed(ctx, ROOT, topics, ends))
                pairs = [m[1] / o[1] for m, o in zip(mains, offs, strict=True)]
                cpu_ratio = statistics.median(pairs)
                wall_ratio = statistics.median(
                    o[0] / m[0] for m, o in zip(mains, offs, strict=True)
                )
                rows.append(
                    [
                        f"main's worker ({sha}), own process (median of {PAIRS})",
                        statistics.median(m[0] for m in mains),
                        "-",
                        f"CPU {statistics.median(m[1] for m in mains):.2f} s",
                    ]
                )
                rows.append(
                    [
                        f"this worker, tracing off, own process (median of {PAIRS})",
                        statistics.median(o[0] for o in offs),
                        "-",
                        f"CPU {statistics.median(o[1] for o in offs):.2f} s; ratio {cpu_ratio:.3f} "
                        f"by CPU (pairs {', '.join(f'{r:.3f}' for r in pairs)}), "
                        f"{wall_ratio:.3f} by wall",
                    ]
                )
                figures.append(
                    Figure(
                        "tracing_off_worker_ratio",
                        round(cpu_ratio, 3),
                        "ratio",
                        f"main's worker at {sha} (before the tracing spans), own process: events "
                        f"per CPU second, median of {PAIRS} alternated pairs (by wall "
                        f"{wall_ratio:.3f})",
                        cond,
                    )
                )
        endpoint = _jaeger_endpoint()
        into = "OTLP/HTTP into the stack's Jaeger" if endpoint else "a no-op exporter (no Jaeger)"
        off = sampled = 0.0
        for rnd in (1, 2):
            progress(f"tracing round {rnd}: worker, tracing off")
            off = max(off, run_worker(ctx, topics, ends)[0])
            progress(f"tracing round {rnd}: worker, 1 % head sampling into {into}")
            tracing = _sampled_tracing(endpoint)
            sampled = max(sampled, run_worker(ctx, topics, ends, tracing=tracing)[0])
            tracing.shutdown()
        rows.append(["worker, tracing off (this process)", off, "-", "-"])
        rows.append(
            [f"worker, 1 % head sampling into {into}", sampled, "-", f"ratio {sampled / off:.3f}"]
        )
        figures.append(
            Figure(
                "tracing_sampled_worker_ratio",
                round(sampled / off, 3),
                "ratio",
                "same worker with tracing off, alternated",
                f"{cond}; spans {into}",
            )
        )
        progress("tracing: completeness of sampled answers' traces")
        share, wanted = completeness(ctx, topics, ends, published)
        rows.append(
            [
                "trace completeness (publish, batch link, inference, produce)",
                share,
                "-",
                f"{wanted:,} sampled answers",
            ]
        )
        figures.append(
            Figure(
                "trace_completeness",
                round(share, 4),
                "share",
                "-",
                f"{cond}; answers whose input heartbeat was sampled at publish (1 %), in-memory exporters",
            )
        )
    finally:
        admin.delete_topics([t.name for t in topics])
    notes = [
        "Tracing: tracing_off_worker_ratio times this tree's worker with tracing off against main's "
        "worker (the tree exported at the commit before the tracing spans), each a bounded run in a "
        "process of its own over the same backlog, in 5 alternated pairs; the figure is events per "
        "CPU second (main's CPU over this one's, the median of the pairs: CPU per event hardly "
        "moves with other work on the machine, wall rates do; with tracing off the worker pays one "
        "attribute check per batch, so a pair below 1 is the machine's noise, which the listed "
        "pairs show); "
        "tracing_sampled_worker_ratio runs in this process, off and sampled alternated twice; the "
        "backlog was published with 1 % head sampling, so about 1 % of inputs carry a sampled context. "
        "trace_completeness counts, per answer and sampled input heartbeat, whether the batch span "
        "was kept, links that heartbeat's publish span and has inference and produce children.",
    ]
    return rows, figures, notes
