"""A benchmark run rewrites only its own section of BENCHMARKS.md: the targets table at the top
and each figure's history after its section's end marker are the authors' and survive it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.support import harness
from bench.support.harness import Figure, Report

ROOT = Path(__file__).resolve().parents[2]


def _glance(text: str) -> str:
    return text.split("## Targets at a glance", 1)[1].split("<!-- bench:", 1)[0]


def test_a_run_keeps_the_targets_table_and_the_histories(tmp_path, monkeypatch):
    shipped = (ROOT / "BENCHMARKS.md").read_text()
    markdown, results = tmp_path / "BENCHMARKS.md", tmp_path / "results.json"
    markdown.write_text(shipped)
    monkeypatch.setattr(harness, "MARKDOWN", markdown)
    monkeypatch.setattr(harness, "RESULTS", results)
    report = Report("Kafka, again", ["a"], [[1]], [Figure("kafka_x", 2.0, "msgs/s", "-", "c")])
    harness.record("kafka", "python -m bench kafka", report)
    text = markdown.read_text()
    kafka = re.search(r"<!-- bench:kafka:start -->(.*?)<!-- bench:kafka:end -->", text, re.S)
    assert kafka and "### Kafka, again" in kafka.group(1)
    assert "### Kafka, again" not in shipped  # the section did change
    assert _glance(text) == _glance(shipped)
    assert text.count("#### Targets: history") == shipped.count("#### Targets: history") > 10
    assert json.loads(results.read_text())["kafka_x"]["value"] == 2.0


def test_every_figure_at_a_glance_is_one_the_benchmarks_record():
    """The table names figures by their results.json names (bar the one compared across
    checkouts), so a reader can find each in its section."""
    recorded = set(json.loads((ROOT / "bench" / "results.json").read_text()))
    rows = [r for r in _glance((ROOT / "BENCHMARKS.md").read_text()).splitlines() if "| `" in r]
    named = {m.group(1) for r in rows if (m := re.search(r"\| `(\w+)` ", r))}
    assert len(rows) >= 40 and len(named) >= 40
    assert [
        r for r in rows if r.count(" | ") != 5
    ] == []  # target, figure, goal, met, date, command
    assert named - recorded == set()
