"""`precast features --data FILE --out FILE`: the worker's feature matrix of a table of sources,
for training anywhere (precast.fleet.matrix; docs/models.md, "Bring your own model").

The output holds the columns kept from the input (the label, device and time columns, or those
named with --keep), then one column per model input in the spec's order, named as the model's
manifest names them. Standardized features stay raw unless --model gives a manifest whose
statistics apply. Every coercion is counted on stderr: nulls given a feature's missing value,
categories outside the vocabulary, rows dropped and why."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from precast.errors import ConfigError

# Kept from the input when present (besides --keep): what training elsewhere needs beside x.
KEPT = ("label", "device_id", "time_ms", "event_time_ms", "feature_time_ms", "event_time")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, help="CSV or Parquet file (or folder)")
    parser.add_argument("--out", type=Path, required=True, help="output: .parquet or .csv")
    parser.add_argument("--spec", type=Path, help="fleet spec (default PRECAST_FLEET__SPEC)")
    parser.add_argument(
        "--model", type=Path, help="a model folder whose manifest's statistics standardize"
    )
    parser.add_argument(
        "--keep", default="", help="more input columns to copy to the output, comma-separated"
    )


def _statistics(folder: Path | None) -> dict[str, tuple[float, float]] | None:
    if folder is None:
        return None
    path = folder / "manifest.json"
    try:
        stats = json.loads(path.read_text()).get("standardize", {})
        return {str(k): (float(v[0]), float(v[1])) for k, v in stats.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise ConfigError(f"cannot read the statistics of {path}: {exc}") from None


def _run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from precast.fleet import load_fleet
    from precast.fleet.matrix import feature_matrix, read_columns

    if args.out.suffix not in (".parquet", ".pq", ".csv"):
        raise ConfigError(f"--out {args.out}: name a .parquet or .csv file")
    fleet = load_fleet(args.spec or settings.fleet.spec)
    stats = _statistics(args.model)
    if stats is not None and set(fleet.features.standardized) - set(stats):
        missing = sorted(set(fleet.features.standardized) - set(stats))
        raise ConfigError(f"--model {args.model}: no statistics for {missing[0]!r}")
    cols = read_columns(args.data)
    m = feature_matrix(fleet, cols, stats)
    keep = [c for c in KEPT if c in cols]
    extra = [c for c in args.keep.split(",") if c]
    absent = [c for c in extra if c not in cols]
    if absent:
        raise ConfigError(f"--keep: the input has no column {absent[0]!r}")
    out: dict[str, Any] = {c: [v for v, k in zip(cols[c], m.kept, strict=True) if k] for c in keep}
    out |= {c: [v for v, k in zip(cols[c], m.kept, strict=True) if k] for c in extra}
    out |= {name: np.asarray(m.x[:, j]) for j, name in enumerate(fleet.features.names)}
    table = pa.table(out)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.out.suffix == ".csv":
            pacsv.write_csv(table, args.out)
        else:
            pq.write_table(table, args.out)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    done = m.coercions
    how = "sources through the spec's features" if m.from_sources else "feature columns as given"
    print(
        f"{args.out}: {len(m.x)} of {done.rows} rows, {fleet.features.width} feature columns "
        f"({how}; {fleet.describe()})"
    )
    for line in done.lines():
        print(f"  {line}", file=sys.stderr)
    if fleet.features.standardized and stats is None:
        print(
            f"  raw (not standardized): {', '.join(fleet.features.standardized)}; fit their "
            "mean and std on your training rows and give them to `precast model bind`",
            file=sys.stderr,
        )
    return 0


COMMAND = Command(
    "features",
    help="the worker's feature matrix of a CSV/Parquet table of sources, for training "
    "elsewhere: --data FILE --out FILE (docs/models.md)",
    arguments=_arguments,
    run=_run,
    description=__doc__,
    raw_description=True,
)
