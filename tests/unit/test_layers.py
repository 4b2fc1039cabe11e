"""The project's layering, checked on the source: applications meet only through topics,
`schemas` and the shared `precast` package; confluent_kafka stays inside `precast.kafka`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("producers", "workers", "consumer_api")


def imports(pkg: str) -> dict[Path, set[str]]:
    out = {}
    for path in (ROOT / pkg).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        out[path] = names
    return out


@pytest.mark.parametrize("app", APPS)
def test_applications_do_not_import_each_other(app):
    others = set(APPS) - {app}
    bad = {str(p.relative_to(ROOT)): sorted(n & others) for p, n in imports(app).items() if n & others}
    assert not bad


@pytest.mark.parametrize("pkg", [*APPS, "schemas", "precast", "bench"])
def test_confluent_kafka_only_in_the_adapter(pkg):
    adapter = ROOT / "precast" / "kafka"
    bad = [str(p.relative_to(ROOT)) for p, n in imports(pkg).items()
           if "confluent_kafka" in n and adapter not in p.parents]
    assert not bad


def test_schemas_are_pure():
    io_libs = {"confluent_kafka", "redis", "precast", "producers", "workers", "consumer_api", "socket", "requests"}
    bad = {str(p.relative_to(ROOT)): sorted(n & io_libs) for p, n in imports("schemas").items() if n & io_libs}
    assert not bad


def test_shared_package_does_not_import_applications():
    bad = {str(p.relative_to(ROOT)): sorted(n & set(APPS)) for p, n in imports("precast").items() if n & set(APPS)}
    assert not bad
