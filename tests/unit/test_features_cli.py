"""`precast features`: a table of sources in, the worker's feature matrix out, with what was
coerced said on stderr, and bad input as one line and a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from opsctl.cli import main
from precast.fleet import load_fleet
from precast.fleet.matrix import feature_matrix, read_columns

FLEET = load_fleet(None)
HEADER = (
    "label,time_ms,cpu_pct,mem_pct,temperature_c,error_rate,signal_quality,uptime_s,device_type,"
    "firmware,open_work_orders,open_high_priority,alarms_critical_1h,alarms_warning_1h,"
    "hours_since_last_wo"
)
ROWS = [
    "monitor_only,1700000000000,10,20,40,0.01,0.9,3600,camera,6.0.0,0,0,0,0,",
    "remote_restart,1700000001000,,85,50,0.05,0.8,36000,toaster,1.0,1,0,1,2,5",
]


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    path = tmp_path / "sources.csv"
    path.write_text("\n".join([HEADER, *ROWS]) + "\n")
    return path


def test_the_output_is_the_worker_s_matrix_with_the_label_kept(sources, tmp_path, capsys):
    out = tmp_path / "x.parquet"
    assert main(["features", "--data", str(sources), "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["label", "time_ms", *FLEET.features.names]
    expected = feature_matrix(FLEET, read_columns(sources)).x
    got = np.stack([table.column(n).to_numpy() for n in FLEET.features.names], axis=1)
    np.testing.assert_array_equal(got, expected)
    err = capsys.readouterr().err
    assert (
        "cpu_pct 1" in err and "categories outside the vocabulary" in err and "device_type 1" in err
    )


def test_a_model_s_statistics_standardize(tmp_path):
    spec = str(Path(__file__).parents[2] / "schemas/fleets/trailers.toml")
    fleet = load_fleet(spec)
    model = Path(__file__).parents[2] / "workers/models/reefer-service/1.1.0"
    stats = json.loads((model / "manifest.json").read_text())["standardize"]
    name = fleet.features.standardized[0]
    rows = tmp_path / "rows.csv"
    rows.write_text(",".join(f'"{n}"' for n in fleet.features.names) + "\n")
    with rows.open("a") as f:
        f.write(",".join(["3.0"] * fleet.features.width) + "\n")
    raw, std = tmp_path / "raw.csv", tmp_path / "std.csv"
    base = ["features", "--spec", spec, "--data", str(rows)]
    assert main([*base, "--out", str(raw)]) == 0
    assert main([*base, "--out", str(std), "--model", str(model)]) == 0
    mean, sd = stats[name]
    assert read_columns(raw)[name] == [3.0]
    assert read_columns(std)[name][0] == pytest.approx((3.0 - mean) / sd, rel=1e-5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "x.txt"], "name a .parquet or .csv file"),
        (["--out", "x.csv", "--keep", "nope"], "no column 'nope'"),
        (["--out", "x.csv", "--model", "/nonexistent"], "cannot read the statistics"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, sources, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "--model" in argv:  # only a spec that standardizes reads statistics
        argv = [*argv, "--spec", str(Path(__file__).parents[2] / "schemas/fleets/trailers.toml")]
    rc = main(["features", "--data", str(sources), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and message in err[0] and "Traceback" not in err[0]
