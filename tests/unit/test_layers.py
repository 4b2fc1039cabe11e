"""The project's layering, checked on the source: applications meet only through topics,
`schemas` and the shared `precast` package; confluent_kafka stays inside `precast.kafka`; no
module imports itself back through another, function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The operator app (`opsctl`) starts the other applications only as processes (`-m workers.x`).
APPS = ("producers", "workers", "consumer_api", "auditor", "opsctl")
SHARED = ("precast", "schemas")
PACKAGES = (*APPS, *SHARED)


def _sources(pkg: str) -> list[Path]:
    return sorted((ROOT / pkg).rglob("*.py")) if (ROOT / pkg).is_dir() else []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path: Path) -> set[str]:
    """Every module named by an import anywhere in the file (top level or inside functions)."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)
    return names


def imports(pkg: str) -> dict[Path, set[str]]:
    return {p: {n.split(".")[0] for n in _imported_modules(p)} for p in _sources(pkg)}


@pytest.mark.parametrize("app", APPS)
def test_applications_do_not_import_each_other(app):
    others = set(APPS) - {app}
    bad = {
        str(p.relative_to(ROOT)): sorted(n & others) for p, n in imports(app).items() if n & others
    }
    assert not bad


@pytest.mark.parametrize("pkg", [*APPS, *SHARED, "bench"])
def test_confluent_kafka_only_in_the_adapter(pkg):
    adapter = ROOT / "precast" / "kafka"
    bad = [
        str(p.relative_to(ROOT))
        for p, n in imports(pkg).items()
        if "confluent_kafka" in n and adapter not in p.parents
    ]
    assert not bad


def test_schemas_are_pure():
    io_libs = {"confluent_kafka", "redis", "precast", "socket", "requests", *APPS}
    bad = {
        str(p.relative_to(ROOT)): sorted(n & io_libs)
        for p, n in imports("schemas").items()
        if n & io_libs
    }
    assert not bad


def test_shared_package_does_not_import_applications():
    bad = {
        str(p.relative_to(ROOT)): sorted(n & set(APPS))
        for p, n in imports("precast").items()
        if n & set(APPS)
    }
    assert not bad


def module_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (a `from pkg import name` counts as `pkg.name`
    when that is a module, else as `pkg`)."""
    paths = [p for pkg in PACKAGES for p in _sources(pkg)]
    known = {_module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for p in paths:
        me = _module_name(p)
        deps = set()
        for name in _imported_modules(p):
            while name and name not in known:
                name = name.rpartition(".")[0]
            # A package's __init__ re-exporting its own modules is not a cycle worth flagging.
            if name and name != me and not name.startswith(me + "."):
                deps.add(name)
        graph[me] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(module_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_over_400_lines():
    """Small modules named for what they hold: a module past 400 lines is split by concern."""
    big = {
        str(p.relative_to(ROOT)): n
        for pkg in (*PACKAGES, "bench")  # the benchmarks are code the project keeps too
        for p in _sources(pkg)
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not big
