"""No `precast` command ends in a traceback on bad input: a one-line error and a non-zero exit,
whatever file, value or missing action it is given (issue 38). Runs the real console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "precast"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    garbage = d / "garbage.toml"
    garbage.write_bytes(b"\xff\xfe[fleet\x00")
    not_toml = d / "not.toml"
    not_toml.write_text("[fleet\nname = 1\n")
    broken = d / "broken.toml"
    broken.write_text('[fleet]\nname = "x"\nversion = 1\n[serving]\nlabels = "a"\n')
    csv = d / "rows.csv"
    csv.write_text("a,b\n1,2\n")
    return {"garbage": garbage, "not_toml": not_toml, "broken": broken, "csv": csv, "dir": d}


CASES = [
    ["model"],
    ["fleet"],
    ["fleet", "show", "{broken}"],
    ["fleet", "show", "{garbage}"],
    ["fleet", "show", "--json", "{not_toml}"],
    ["fleet", "check", "{dir}"],
    ["fleet", "check", "/nonexistent.toml"],
    ["features", "--data", "{csv}", "--out", "{dir}/x.csv"],
    ["features", "--data", "{garbage}", "--out", "{dir}/x.csv"],
    ["features", "--data", "{csv}", "--out", "{dir}/x.csv", "--spec", "{broken}"],
    ["train", "--version", "not-semver", "--simulate", "10"],
    ["train", "--version", "1.0.0", "--data", "{garbage}", "--out", "{dir}/m"],
    ["model", "bind", "{dir}"],
    ["distill", "--teacher", "9.9.9", "--version", "1.0.0", "--simulate", "10"],
    ["quantize", "9.9.9", "--version", "1.0.0"],
    ["dataset", "show", "{dir}"],
    ["promote", "9.9.9", "--registry", "{dir}"],
    ["schemas", "export", "{garbage}/x"],
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) for c in CASES])
def test_bad_input_is_one_line_never_a_traceback(argv, files):
    args = [a.format(**files) for a in argv]
    r = subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(errors) >= 1 and "internal error" not in r.stderr, r.stderr
