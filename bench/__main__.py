"""python -m bench NAME [--quick] | all | list"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType

from bench import benchmarks
from bench.support.harness import Context, progress, record, render_table
from precast.runtime import OneLineParser


def available() -> dict[str, ModuleType]:
    """Every module of bench/benchmarks/ by its NAME; the support modules live elsewhere."""
    mods = {}
    for info in pkgutil.iter_modules(benchmarks.__path__):
        mod = importlib.import_module(f"{benchmarks.__name__}.{info.name}")
        mods[mod.NAME] = mod
    return dict(sorted(mods.items()))


def main(argv: list[str] | None = None) -> int:
    mods = available()
    p = OneLineParser(prog="python -m bench", description="precast benchmarks")
    p.add_argument("name", help=f"one of: {', '.join(mods)}, all, list")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = p.parse_args(argv)
    if args.name == "list":
        for name, mod in mods.items():
            print(f"{name:<12} {mod.DESCRIPTION}")
        return 0
    names = list(mods) if args.name == "all" else [args.name]
    unknown = [n for n in names if n not in mods]
    if unknown:
        print(f"bench: unknown benchmark {unknown[0]!r} (have: {', '.join(mods)})", file=sys.stderr)
        return 2
    from opsctl.settings import StackCliSettings
    from opsctl.stack import LocalStack
    from precast.settings import load

    # PRECAST_STACK__* apply (home, ports): a checkout reuses the shared running stack.
    stack = LocalStack(load(StackCliSettings).stack)
    stack.up(progress=progress)
    ctx = Context(stack.bootstrap_servers, stack.redis_url, args.quick)
    for name in names:
        progress(f"running {name} ...")
        report = mods[name].run(ctx)
        spare = getattr(mods[name], "SPARE_CPU", None)
        if spare:
            report.notes.append(f"Spare CPU: {spare}")
        print(f"\n{report.title}\n{render_table(report.columns, report.rows)}\n")
        for f in report.figures:
            print(f"  {f.name} = {f.value:.4g} {f.unit}  (vs {f.baseline})")
        for n in report.notes:
            print(f"  note: {n}")
        if not args.quick:
            record(report.section or name, f"python -m bench {name}", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
