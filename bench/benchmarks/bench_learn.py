"""Learn from outcomes: `precast dataset build` against `precast replay` on the same range,
a model retrained from 30 minutes of resolved work orders against the stale live model and
models trained on the drifted ground truth, and the dataset's point-in-time leaks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.support.harness import Context, Figure, Report, app_env, progress
from bench.support.loads.learn_stream import DRIFT, Stream, publish

NAME = "learn"
DESCRIPTION = "dataset build vs replay, retrained vs stale and ground-truth models, PIT leaks"
ROLES = ("heartbeats", "work_orders", "alarms")
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "accuracy, agreement and leak figures none (they are counts); the build-vs-replay ratio "
    "and its events/s need a core each for the build or replay process and the broker, run one "
    "after the other, nothing else running."
)


PEAK_RSS: dict[str, float] = {}  # command -> peak resident memory, MiB


def _cli(env: dict[str, str], *args: str, timeout: float = 1800) -> str:
    """Run `precast ARGS`, keeping the command's peak RSS (polled from /proc every 0.1 s)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "opsctl.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    peak, stop = [0.0], threading.Event()

    def poll() -> None:
        while not stop.wait(0.1):
            try:
                text = Path(f"/proc/{p.pid}/status").read_text()
            except OSError:
                return
            m = re.search(r"VmRSS:\s+(\d+) kB", text)
            if m:
                peak[0] = max(peak[0], int(m.group(1)) / 1024)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    stdout, stderr = p.communicate(timeout=timeout)
    stop.set()
    t.join()
    PEAK_RSS[args[0]] = max(PEAK_RSS.get(args[0], 0.0), peak[0])
    if p.returncode != 0:
        raise SystemExit(f"bench learn: precast {args[0]} failed: {stderr.strip()[-500:]}")
    return stdout


def _seconds(stdout: str) -> float:
    m = re.search(r" in ([\d.]+)s", stdout)
    if not m:
        raise SystemExit(f"bench learn: no timing in {stdout[-300:]!r}")
    return float(m.group(1))


def _replay(env: dict[str, str], topics: Any, t_from: str, t_to: str) -> tuple[int, float]:
    """(records copied, seconds) of `precast replay` of every event topic over the range."""
    n, secs = 0, 0.0
    for role in ROLES:
        src = getattr(topics, role).name
        out = _cli(
            env, "replay", src, f"{src}.copy", "--from", t_from, "--to", t_to,
            "--create-target", "--fresh", "--no-progress",
        )  # fmt: skip
        m = re.search(r"wrote ([\d,]+) records", out)
        n += int(m.group(1).replace(",", "")) if m else 0
        secs += _seconds(out)
    return n, secs


def _dataset(env: dict[str, str], out: Path, t_from: str, t_to: str, until: str) -> float:
    stdout = _cli(
        env, "dataset", "build", "--from", t_from, "--to", t_to, "--out", str(out),
        "--resolved-until", until, "--no-progress", "--fresh",
    )  # fmt: skip
    return _seconds(stdout)


def _rows(folder: Path, names: tuple[str, ...]) -> tuple[np.ndarray, list[str], dict[str, Any]]:
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {}
    for part in sorted(folder.glob("part-*.parquet")):
        t = pq.read_table(part)
        for c in t.column_names:
            cols.setdefault(c, []).extend(t.column(c).to_pylist())
    x = np.asarray([cols.get(n, []) for n in names], dtype=np.float32).T.reshape(-1, len(names))
    return x, list(cols.get("entity_id", [])), cols


def _leaks(stream: Stream, folders: list[Path], names: tuple[str, ...]) -> tuple[int, int]:
    """(rows whose features are not the reference's or whose heartbeat is later than the
    open, rows checked) over every dataset of the range."""
    leaks = checked = 0
    for folder in folders:
        x, entities, cols = _rows(folder, names)
        for i, e in enumerate(entities):
            checked += 1
            ref = stream.reference.get(e)
            late = cols["heartbeat_time_ms"][i] > cols["time_ms"][i]
            if late or ref is None or not np.allclose(x[i], ref, atol=1e-5, rtol=0):
                leaks += 1
                if leaks <= 5:  # what differs, for whoever must find out why
                    differing = (
                        "no reference row"
                        if ref is None
                        else ", ".join(
                            f"{names[j]} {x[i][j]:g} vs {ref[j]:g}"
                            for j in np.flatnonzero(~np.isclose(x[i], ref, atol=1e-5))[:4]
                        )
                    )
                    progress(
                        f"learn: leak? {e} opened {cols['time_ms'][i]}, heartbeat "
                        f"{cols['heartbeat_time_ms'][i]} (reference's "
                        f"{stream.reference_hb_ms.get(e)}), differing: {differing}"
                    )
    return leaks, checked


def _accuracy(folder: Path, fleet: Any, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    from workers.model.inference import ModelSession

    s = ModelSession(folder, fleet=fleet, provider="cpu")
    labels = fleet.spec.labels
    to_spec = np.array([labels.index(lab) for lab in s.labels])
    p = s.predict(
        fleet.features.standardize(x, s.standardization) if fleet.features.standardized else x
    )
    ranked = to_spec[np.argsort(-p, axis=1)]
    return float((ranked[:, 0] == y).mean()), float(
        (ranked[:, :3] == y[:, None]).any(axis=1).mean()
    )


def run(ctx: Context) -> Report:
    from opsctl.toolkit.ranges import format_time
    from precast.fleet import load_fleet
    from precast.fleet.simulate.training import training_rows
    from precast.kafka import Admin
    from schemas.topics import catalog
    from workers.settings import DEFAULT_MODEL_DIR
    from workers.training.data import Labelled
    from workers.training.train import train

    devices = int(os.environ.get("PRECAST_BENCH_LEARN_DEVICES", 800 if ctx.quick else 8_000))
    hb_s, speedup, train_min, test_min = 10.0, 60.0, 30.0, 10.0
    fleet = load_fleet()
    admin = Admin(ctx.kafka_settings())
    prefix = ctx.unique("learn") + "."
    topics = catalog(prefix, 6)
    admin.ensure_topics(list(topics))
    work = Path(tempfile.mkdtemp(prefix="bench-learn-"))
    env = app_env(ctx.bootstrap_servers, topics, 6, PRECAST_OPS__STATE_DIR=str(work / "state"))
    try:
        progress(
            f"learn: {devices:,} devices, heartbeat every {hb_s:g} s, incidents x{speedup:g}, drifted"
        )
        t0 = time.perf_counter()
        s = publish(
            ctx.kafka_settings(), fleet, topics, devices=devices, hb_s=hb_s, speedup=speedup,
            train_min=train_min, test_min=test_min, seed=21, now_ms=int(time.time() * 1000),
        )  # fmt: skip
        progress(f"learn: {sum(s.records.values()):,} records in {time.perf_counter() - t0:.0f}s")
        t_from, t_cut, t_end = (format_time(v) for v in (s.first_ms, s.cut_ms, s.end_ms))
        until = format_time(s.end_ms + 1)
        progress("learn: precast replay of the training range")
        n_range, replay_s = _replay(env, topics, t_from, t_cut)
        progress("learn: precast dataset build of the same range")
        train_ds, test_ds = work / "train-ds", work / "test-ds"
        build_s = _dataset(env, train_ds, t_from, t_cut, until)
        _dataset(env, test_ds, t_cut, t_end, until)
        names = fleet.features.names
        leaks, checked = _leaks(s, [train_ds, test_ds], names)
        progress("learn: train on the outcomes, and the references")
        _cli(
            env,
            "train",
            "--dataset",
            str(train_ds),
            "--version",
            "9.0.0",
            "--out",
            str(work / "retrained"),
        )
        x_tr, e_tr, _ = _rows(train_ds, names)
        y_tr = np.asarray([s.truth[e] for e in e_tr])
        train(fleet, Labelled(x_tr, y_tr, None, "outcome rows, true labels"), "9.0.1",
              work / "oracle-rows", name="oracle", seed=7)  # fmt: skip
        xs, ys = training_rows(fleet, 60_000, seed=31, drift=DRIFT)
        train(fleet, Labelled(xs, ys, None, "drifted ground truth (simulator)"), "9.0.2",
              work / "oracle-sim", name="oracle", seed=7)  # fmt: skip
        x_te, e_te, _ = _rows(test_ds, names)
        y_te = np.asarray([s.truth[e] for e in e_te])
        acc = {
            name: _accuracy(folder, fleet, x_te, y_te)
            for name, folder in (
                ("stale", DEFAULT_MODEL_DIR),
                ("retrained", work / "retrained"),
                ("oracle_rows", work / "oracle-rows"),
                ("oracle_sim", work / "oracle-sim"),
            )
        }
    finally:
        admin.delete_topics(
            [t.name for t in topics] + [f"{getattr(topics, r).name}.copy" for r in ROLES]
        )
        shutil.rmtree(work, ignore_errors=True)
    return _report(
        s, devices, n_range, replay_s, build_s, leaks, checked, len(y_tr), len(y_te), acc
    )


def _report(
    s: Stream,
    devices: int,
    n_range: int,
    replay_s: float,
    build_s: float,
    leaks: int,
    checked: int,
    n_train: int,
    n_test: int,
    acc: dict[str, tuple[float, float]],
) -> Report:
    build_rate, replay_rate = n_range / build_s, n_range / replay_s
    best = max(acc["oracle_rows"][0], acc["oracle_sim"][0])
    recovers = acc["retrained"][0] / best if best else 0.0
    mix = ", ".join(f"{k} {v:,}" for k, v in s.records.items())
    cond = (
        f"{devices:,} devices (built-in fleet), 30 min of outcomes + 10 min held out, heartbeat "
        f"every 10 s, incident clock x60, drift profile shift (mix 0.3, signatures rotated) from "
        f"the start; {n_train:,} training rows, {n_test:,} test rows"
    )
    ratio = round(build_rate / replay_rate, 3)
    rss = (round(PEAK_RSS.get("replay", 0)), round(PEAK_RSS.get("dataset", 0)))
    rows = [
        ["precast replay, event topics of the training range", n_range, round(replay_rate), 1.0],
        ["precast dataset build, same range", n_range, round(build_rate), ratio],
        ["peak RSS, MiB: replay, dataset build", "", *rss],
    ]
    acc_rows = [
        [f"model: {name}", n_test, f"top-1 {a[0]:.3f}", f"top-3 {a[1]:.3f}"]
        for name, a in acc.items()
    ]
    return Report(
        title="Learn from outcomes (dataset build, retraining after drift, point-in-time)",
        columns=["what", "records / rows", "records/s or top-1", "ratio or top-3"],
        rows=rows + acc_rows,
        figures=[
            Figure(
                "dataset_build_events_per_s",
                round(build_rate),
                "events/s",
                "-",
                f"records of the range ({mix}) / the build's own time, 6 partitions",
            ),
            Figure(
                "dataset_build_vs_replay",
                round(build_rate / replay_rate, 3),
                "ratio",
                "precast replay of the same range (its own copy time)",
                "goal >= 0.5",
            ),
            Figure(
                "retrain_recovers_accuracy",
                round(recovers, 3),
                "ratio",
                "top-1 of the better model trained on the drifted ground truth",
                f"retrained top-1 / that; {cond}",
            ),
            Figure(
                "retrain_stale_model_accuracy",
                round(acc["stale"][0], 4),
                "top-1",
                "the live model trained before the drift (fleet-strategy 1.0.0)",
                cond,
            ),
            Figure(
                "retrain_retrained_model_accuracy",
                round(acc["retrained"][0], 4),
                "top-1",
                "precast train --dataset (mlp)",
                cond,
            ),
            Figure(
                "retrain_ground_truth_model_accuracy",
                round(best, 4),
                "top-1",
                "max(outcome rows with true labels, 60k simulated drifted rows)",
                cond,
            ),
            Figure(
                "dataset_build_peak_rss_mib",
                round(PEAK_RSS.get("dataset", 0)),
                "MiB",
                "-",
                f"the build's process over {n_range:,} records (/proc VmRSS every 0.1 s)",
            ),
            Figure(
                "point_in_time_leaks",
                leaks,
                "rows",
                "0",
                f"{checked:,} rows of both datasets against the reference (events at or "
                "before each open, in the order they happened)",
            ),
        ],  # fmt: skip
        notes=[
            "Test rows: work orders opened in the 10 minutes after the training range, built by "
            "`precast dataset build`, labelled with the device's true condition at the open "
            "(not its resolution). Training rows: the 30-minute range's resolutions (5 % wrong, "
            "10 % missing, as `precast-simulator` resolves by default).",
            "Ground-truth models: the same outcome rows with true labels, and `precast train "
            "--simulate`'s rows of a fleet drifted the same way (60k); the better one is the "
            "reference.",
            "Replay and build read the same offsets (the three event topics' records in the "
            "range); the build also reads the work orders twice and its context lookback. One "
            "Python process each, CPU-bound: a busy machine lowers both.",
        ],
    )
