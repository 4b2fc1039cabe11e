"""Every benchmark says how much spare CPU its figures need (issue 27): each `bench` module
defines `SPARE_CPU`, and every section it has recorded in BENCHMARKS.md carries that note."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _benchmarks() -> dict[str, str | None]:
    """NAME -> SPARE_CPU (None when absent) of each bench module, read without importing it."""
    out: dict[str, str | None] = {}
    for path in sorted((ROOT / "bench" / "benchmarks").glob("bench_*.py")):
        consts: dict[str, object] = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and target.id in ("NAME", "SPARE_CPU"):
                    consts[target.id] = ast.literal_eval(node.value)
        if "NAME" in consts:
            spare = consts.get("SPARE_CPU")
            out[str(consts["NAME"])] = spare if isinstance(spare, str) else None
    return out


def test_every_benchmark_says_what_spare_cpu_it_needs():
    found = _benchmarks()
    assert len(found) >= 15, found  # the modules were read at all
    assert [name for name, spare in found.items() if not spare] == []


def test_every_recorded_section_carries_its_spare_cpu_note():
    text = (ROOT / "BENCHMARKS.md").read_text()
    sections = dict(
        re.findall(r"<!-- bench:([\w:-]+):start -->(.*?)<!-- bench:\1:end -->", text, re.S)
    )
    assert len(sections) >= 15, sorted(sections)
    assert [name for name, body in sections.items() if "- Spare CPU: " not in body] == []
