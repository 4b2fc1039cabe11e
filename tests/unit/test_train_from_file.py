"""`precast train --data`: the split it used and why, a named time column in any of the usual
forms, and a count of what it coerced or dropped, instead of silence (issue 38)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from precast.fleet import load_fleet
from precast.fleet.simulate.training import training_rows
from workers.training.train import main

pytest.importorskip("sklearn")
FLEET = load_fleet()
T0 = 1_760_000_000_000


def _write(path, n=400, time_name=None, time_kind="ms", nulls=0, unknown=0):
    x, y = training_rows(FLEET, n, seed=3)
    cols = {name: x[:, j].tolist() for j, name in enumerate(FLEET.features.names)}
    cols["label"] = [FLEET.spec.labels[i] for i in y]
    for i in range(nulls):
        cols["cpu_pct"][i] = None
    if time_name:
        ms = [T0 + 1000 * i for i in range(n)]
        if time_kind == "iso":
            cols[time_name] = [datetime.fromtimestamp(t / 1000, UTC).isoformat() for t in ms]
        elif time_kind == "timestamp":
            cols[time_name] = [datetime.fromtimestamp(t / 1000, UTC) for t in ms]
        else:
            cols[time_name] = ms
    pacsv.write_csv(pa.table(cols), path)
    return path


def _train(tmp_path, *argv):
    out = tmp_path / "m"
    rc = main(["--version", "1.0.0", "--out", str(out), *argv])
    return rc, out


@pytest.mark.parametrize("kind", ["ms", "iso", "timestamp"])
def test_a_named_time_column_orders_the_holdout(tmp_path, capsys, kind):
    data = _write(tmp_path / "rows.csv", time_name="event_time", time_kind=kind)
    rc, out = _train(tmp_path, "--data", str(data), "--time-column", "event_time")
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "rows ordered by 'event_time'" in err
    split = json.loads((out / "manifest.json").read_text())["training"]["split"]
    assert split.startswith("time-based: train before") and str(T0 + 320_000) in split


def test_without_a_time_column_the_random_split_is_said(tmp_path, capsys):
    data = _write(tmp_path / "rows.csv")
    rc, out = _train(tmp_path, "--data", str(data))
    err = capsys.readouterr().err
    assert rc == 0 and "no time column" in err and "random split" in err


def test_a_time_column_that_is_not_there_is_an_error(tmp_path, capsys):
    data = _write(tmp_path / "rows.csv")
    rc, _ = _train(tmp_path, "--data", str(data), "--time-column", "ts")
    assert rc == 2 and "no time column 'ts'" in capsys.readouterr().err


def test_nulls_in_feature_columns_are_dropped_and_counted(tmp_path, capsys):
    data = _write(tmp_path / "rows.csv", nulls=7)
    rc, out = _train(tmp_path, "--data", str(data))
    err = capsys.readouterr().err
    assert rc == 0 and "rows dropped (7): null in a feature column 7" in err
    assert json.loads((out / "manifest.json").read_text())["training"]["samples"] == 393 - 79


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--simulate", "5000", "--version", "v1"], "not a semantic version"),
        (["--simulate", "10"], "at least 200 rows"),
    ],
)
def test_bad_versions_and_tiny_runs_are_one_line(tmp_path, capsys, argv, message):
    rc = main(
        [
            *(["--version", "1.0.0"] if "--version" not in argv else []),
            *argv,
            "--out",
            str(tmp_path / "m"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0]
