"""A package uses another package only through its public names: a leading underscore means
"may change without notice", which is not something another package can build on."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "precast", "producers", "workers", "consumer_api", "opsctl", "auditor")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports_across_packages(root: Path = ROOT) -> list[str]:
    found = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                    continue
                if node.module.split(".")[0] == pkg:
                    continue
                found += [
                    f"{path.relative_to(root)}:{node.lineno} imports {node.module}.{a.name}"
                    for a in node.names
                    if _private(a.name) or any(_private(part) for part in node.module.split("."))
                ]
    return found


def test_no_package_imports_another_packages_private_names() -> None:
    assert private_imports_across_packages() == []


def test_the_check_finds_a_private_import(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "x.py").write_text(
        "from schemas.normalize import _HIDDEN\nfrom workers.y import _own_package_is_fine\n"
    )
    (tmp_path / "consumer_api").mkdir()
    (tmp_path / "consumer_api" / "z.py").write_text("from precast._impl import thing\n")
    assert private_imports_across_packages(tmp_path) == [
        "workers/x.py:1 imports schemas.normalize._HIDDEN",
        "consumer_api/z.py:1 imports precast._impl.thing",
    ]
