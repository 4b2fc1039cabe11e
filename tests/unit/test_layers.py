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


def test_benchmarks_share_code_only_through_support():
    """bench/benchmarks/ holds one module per `python -m bench NAME`; what two of them share
    lives in bench/support/, so no bench module imports a benchmark module."""
    bad = {
        str(p.relative_to(ROOT)): found
        for p in _sources("bench")
        if (found := sorted(n for n in _imported_modules(p) if n.startswith("bench.benchmarks.")))
    }
    assert bad == {}


# The size rule is a concern rule: a module holds one concern and is split by concern, never
# into mixin halves. Length alone only decides past LINE_LIMIT; between ONE_CLASS_ABOVE and it a
# module may hold one public class (with its helpers), not several.
LINE_LIMIT = 600
ONE_CLASS_ABOVE = 400


def _base_name(base: ast.expr) -> str | None:
    """`Name`, `mod.Name` and `Name[T]` as `Name`; anything else (a call, ...) as None."""
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else None


def project_classes(sources: dict[str, str]) -> set[str]:
    """Top-level classes defined in the project that are not protocols: the bases that make a
    class a pile of mixin halves (a protocol names what a part must offer, so it may be many)."""
    kinds: dict[str, set[bool]] = {}
    for source in sources.values():
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                is_protocol = "Protocol" in {_base_name(b) for b in node.bases}
                kinds.setdefault(node.name, set()).add(is_protocol)
    return {name for name, protocol in kinds.items() if False in protocol}


def concern_problems(path: str, source: str, project: set[str]) -> dict[str, str]:
    """What breaks the concern rule in one module: key (`path` or `path::Class`) -> why."""
    found: dict[str, str] = {}
    lines = len(source.splitlines())
    tree = ast.parse(source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    public = [c.name for c in classes if not c.name.startswith("_")]
    if lines > LINE_LIMIT:
        found[path] = f"{lines} lines (limit {LINE_LIMIT})"
    elif lines > ONE_CLASS_ABOVE and len(public) > 1:
        found[path] = f"{lines} lines and {len(public)} public classes ({', '.join(public)})"
    for c in classes:
        halves = [n for b in c.bases if (n := _base_name(b)) in project]
        if len(halves) >= 2:
            found[f"{path}::{c.name}"] = f"built from mixin halves ({', '.join(halves)})"
    return found


def concern_offenders(sources: dict[str, str]) -> dict[str, str]:
    project = project_classes(sources)
    found: dict[str, str] = {}
    for path, source in sources.items():
        found.update(concern_problems(path, source, project))
    return found


def _checked_sources() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text()
        for pkg in (*PACKAGES, "bench")  # the benchmarks are code the project keeps too
        for p in _sources(pkg)
    }


def test_every_module_holds_one_concern():
    """All offenders at once, each with its reason."""
    assert concern_offenders(_checked_sources()) == {}


def _lines(n: int) -> str:
    return "".join(f"x{i} = {i}\n" for i in range(n))


def test_concern_rule_passes_one_class_and_small_modules():
    one = "class Reader:\n    pass\n\n\nclass _Helper:\n    pass\n" + _lines(550)
    two_small = "class A:\n    pass\n\n\nclass B:\n    pass\n" + _lines(300)
    assert concern_offenders({"one.py": one, "small.py": two_small}) == {}


def test_concern_rule_flags_size_and_two_public_classes():
    too_long = _lines(LINE_LIMIT + 1)
    two_big = "class A:\n    pass\n\n\nclass B:\n    pass\n" + _lines(ONE_CLASS_ABOVE)
    found = concern_offenders({"long.py": too_long, "two.py": two_big})
    assert set(found) == {"long.py", "two.py"}
    assert "601 lines" in found["long.py"] and "A, B" in found["two.py"]


def test_concern_rule_flags_mixin_halves_but_not_protocols():
    parts = (
        "from typing import Protocol\n\n\n"
        "class Ingest:\n    pass\n\n\nclass Scoring:\n    pass\n\n\n"
        "class Sink(Protocol):\n    def put(self) -> None: ...\n\n\n"
        "class Hook(Protocol):\n    def on(self) -> None: ...\n"
    )
    app = (
        "from parts import Hook, Ingest, Scoring, Sink\n\n\n"
        "class Pipeline(Ingest, Scoring):\n    pass\n\n\n"
        "class Shadow(Sink, Hook):\n    pass\n\n\n"
        "class Error(Ingest, ValueError):\n    pass\n"
    )
    found = concern_offenders({"parts.py": parts, "app.py": app})
    assert found == {"app.py::Pipeline": "built from mixin halves (Ingest, Scoring)"}
