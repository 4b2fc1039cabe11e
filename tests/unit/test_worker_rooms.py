"""The worker's rooms: `workers/precompute/` is grouped by stage (state, decide, ingest, score,
publish), and no stage imports one that comes after it in that order, so an import never runs
back up. Stages share only the package's own bottom modules (`items`, `metrics`, `config`); the
modules that wire the stages together (pipeline, loop, rebalancer, outputs, assembly, entry
points) live at the package top and no stage imports them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workers" / "precompute"
STAGES = ("state", "decide", "ingest", "score", "publish")  # each may import those before it
SHARED = {"items", "metrics", "config"}  # the package's bottom: imports no stage, no top module


def _imports(path: Path) -> set[str]:
    """Every `workers.precompute...` module a file imports (`from X import name` counts as
    X.name, since the name may be a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("workers.precompute.")}


def _room(module: str) -> str:
    """'state', 'decide', ... for a stage's module; the module's own name at the top."""
    return module.split(".")[2]


def violations(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        here = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for target in sorted(_imports(path)):
            there = _room(target)
            if there == here:
                continue
            if here in SHARED and there not in SHARED - {here}:
                found.append(f"{rel}: shared module imports {target}")
            elif here in STAGES:
                allowed = SHARED | set(STAGES[: STAGES.index(here)])
                if there not in allowed:
                    found.append(f"{rel}: stage {here} imports {target}")
    return found


def test_no_import_runs_back_up_the_stages():
    assert violations(PACKAGE) == []


def test_every_stage_has_a_room_and_nothing_else_sits_in_a_subpackage():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(STAGES)
    assert all((PACKAGE / s / "__init__.py").is_file() for s in STAGES)


@pytest.mark.parametrize(
    ("stage", "source", "why"),
    [
        ("state", "from workers.precompute.publish import delivery\n", "stage state imports"),
        ("decide", "from workers.precompute.ingest.router import Ingest\n", "stage decide imports"),
        ("score", "import workers.precompute.pipeline\n", "stage score imports"),
        ("items.py", "from workers.precompute.decide import policy\n", "shared module imports"),
    ],
)
def test_the_check_finds_an_import_that_runs_back_up(tmp_path, stage, source, why):
    pkg = tmp_path / "precompute"
    for s in STAGES:
        (pkg / s).mkdir(parents=True)
        (pkg / s / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    target = pkg / stage if stage.endswith(".py") else pkg / stage / "bad.py"
    target.write_text(source)
    (pkg / "ingest" / "fine.py").write_text("from workers.precompute.decide import policy\n")
    found = violations(pkg)
    assert len(found) == 1 and why in found[0]
