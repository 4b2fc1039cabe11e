"""The `precast` CLI's rooms: one module per command under opsctl/commands/, all of them in the
registry the parser is built from, and a toolkit that never reaches back into a command."""

from __future__ import annotations

import argparse
import ast
import pkgutil
from pathlib import Path

import opsctl.commands
from opsctl.cli import build_parser
from opsctl.commands import registry
from opsctl.commands.base import Action, Command, no_arguments

ROOT = Path(__file__).resolve().parents[2]


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_the_parser_lists_the_registry_in_order():
    names = [c.name for c in registry()]
    assert len(names) == len(set(names))
    assert list(_choices(build_parser())) == names


def test_every_command_module_runs_a_command_or_an_action():
    runs = set()
    for command in registry():
        runs.add(command.run.__module__ if command.run else None)
        runs.update(a.run.__module__ for a in command.actions)
    # The pass-through commands (train, model) run nothing here: their module is the trainer's.
    runs.add("opsctl.commands.trainer")
    modules = {
        f"opsctl.commands.{m.name}"
        for m in pkgutil.iter_modules(opsctl.commands.__path__)
        if m.name != "base"
    }
    assert modules <= runs, f"modules no command runs: {sorted(modules - runs)}"


def test_actions_become_subcommands_with_their_own_run():
    def run_a(args, settings):
        return 3

    cmd = Command(
        "thing",
        help="a thing",
        actions=(
            Action("a", help="first", run=run_a, arguments=lambda p: p.add_argument("--x")),
            Action("b", help="second", run=lambda args, settings: 4),
        ),
        action_dest="what",
    )
    parser = argparse.ArgumentParser(prog="t")
    cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["thing", "a", "--x", "1"])
    assert (args.what, args.x, args.fn(args, None)) == ("a", "1", 3)
    assert parser.parse_args(["thing", "b"]).fn(None, None) == 4
    assert no_arguments(parser) is None


def test_the_toolkit_never_imports_a_command():
    offenders = []
    for path in sorted((ROOT / "opsctl" / "toolkit").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.startswith(("opsctl.commands", "opsctl.cli")) for n in names):
                offenders.append(path.name)
    assert offenders == []


def test_a_slim_candidate_is_held_to_agreement_unless_told_otherwise(tmp_path, capsys):
    import json

    from opsctl.commands.promote import SLIM_AGREEMENT, _agreement

    for version, manifest in (("1.1.0", {"method": "distill"}), ("1.2.0", {"name": "m"})):
        (tmp_path / version).mkdir()
        (tmp_path / version / "manifest.json").write_text(json.dumps(manifest))
    assert _agreement(None, tmp_path, "1.1.0") == SLIM_AGREEMENT
    assert "distill candidate" in capsys.readouterr().out
    assert _agreement(0.9, tmp_path, "1.1.0") == 0.9
    assert _agreement(None, tmp_path, "1.2.0") is None
    assert _agreement(None, tmp_path, "9.9.9") is None
