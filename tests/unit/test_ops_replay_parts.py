"""Pure parts of the replay: argument parsing, filters, pacing, resume matching, checkpoints."""

from __future__ import annotations

import json

import pytest

from opsctl.toolkit.filters import RecordFilter
from opsctl.toolkit.job_checkpoint import Checkpoint, fingerprint
from opsctl.toolkit.ranges import TimeRange, parse_offsets, parse_time, parse_time_range
from opsctl.toolkit.replay_pacing import ReplaySchedule
from opsctl.toolkit.resume import Matcher, decode_skips, digest, encode_skips
from precast.errors import ConfigError


def test_times_are_utc_iso8601():
    assert parse_time("2025-01-31T04:00:00Z") == 1_738_296_000_000
    assert parse_time("2025-01-31T04:00:00") == 1_738_296_000_000  # no zone: UTC
    assert parse_time("2025-01-31T05:00:00+01:00") == 1_738_296_000_000
    assert parse_time("2025-01-31T04:00:00.250Z") == 1_738_296_000_250
    for bad in ("yesterday", "2025-13-01T00:00:00Z", "31/01/2025", ""):
        with pytest.raises(ConfigError, match="malformed"):
            parse_time(bad)


def test_time_range_must_go_forward():
    assert parse_time_range("2025-01-01T00:00:00Z", "2025-01-01T01:00:00Z", 0) == TimeRange(
        1_735_689_600_000, 1_735_693_200_000
    )
    assert (
        parse_time_range("2025-01-01T00:00:00Z", None, 1_735_700_000_000).end_ms
        == 1_735_700_000_000
    )
    for a, b in (
        ("2025-01-01T01:00:00Z", "2025-01-01T00:00:00Z"),
        ("2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z"),
    ):
        with pytest.raises(ConfigError, match="reversed or empty"):
            parse_time_range(a, b, 0)


def test_offset_specs():
    assert parse_offsets("0:100-200, 1:50-,2:-10").items == (
        (0, 100, 200),
        (1, 50, None),
        (2, None, 10),
    )
    assert parse_offsets("*:0-1000").items == ((None, 0, 1000),)
    with pytest.raises(ConfigError, match="reversed offset range"):
        parse_offsets("0:200-100")
    for bad in ("0:abc", "100-200", "0:1-2-3", ",", "x:1-2"):
        with pytest.raises(ConfigError):
            parse_offsets(bad)
    with pytest.raises(ConfigError, match="twice"):
        parse_offsets("0:1-2,0:5-6")
    with pytest.raises(ConfigError, match="twice"):
        parse_offsets("*:1-2,0:5-6")


def test_filters():
    hb = b'{"kind":"heartbeat","schema_version":1}'
    al = b'{"kind":"alarm","schema_version":2}'
    f = RecordFilter.from_args(["dev-1,dev-2"], ["heartbeat"], ["1"])
    assert f.matches(b"dev-1", hb, 0)
    assert not f.matches(b"dev-3", hb, 0)
    assert not f.matches(b"dev-1", al, 0)
    assert not f.matches(b"dev-1", b"not json", 0) and not f.matches(b"dev-1", None, 0)
    assert not f.matches(b"dev-1", b"[1,2]", 0)
    assert RecordFilter.from_args(schema_versions=["2"]).matches(None, al, 0)
    timed = RecordFilter(time_range=TimeRange(100, 200))
    assert [timed.matches(b"k", b"", t) for t in (99, 100, 199, 200)] == [False, True, True, False]
    assert RecordFilter().is_open and not timed.is_open
    with pytest.raises(ConfigError, match="unknown event type"):
        RecordFilter.from_args(event_types=["heartbeats"])
    with pytest.raises(ConfigError, match="schema version"):
        RecordFilter.from_args(schema_versions=["v1"])
    with pytest.raises(ConfigError, match="device ID"):
        RecordFilter.from_args(devices=["bad id"])


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_rate_pacing_holds_the_long_run_rate():
    clock = FakeClock()
    p = ReplaySchedule(rate=1000, clock=clock, sleep=clock.sleep)
    for _ in range(5001):
        p.wait(0)
        clock.t += 0.0001  # the work itself takes time too
    assert clock.t == pytest.approx(5.0, rel=0.01)


def test_speed_pacing_follows_record_times():
    clock = FakeClock()
    p = ReplaySchedule(speed=2.0, clock=clock, sleep=clock.sleep)
    for ts in range(0, 10_001, 10):  # 10 s of history
        p.wait(1_000_000 + ts)
    assert clock.t == pytest.approx(5.0, abs=0.01)


def test_pacer_rejects_nonsense():
    for kw in ({"rate": 0}, {"rate": -5}, {"speed": 0}, {"rate": 10, "speed": 2}):
        with pytest.raises(ConfigError):
            ReplaySchedule(**kw)
    assert not ReplaySchedule().active


def test_matcher_finds_the_crashed_runs_prefixes():
    a, b, c, d = (digest(k, b"v", None, 0) for k in (b"a", b"b", b"c", b"d"))
    # Source p0 sends a, b to t0 and c to t1; p1 sends d to t0. The crash left a, d in t0
    # (interleaved) and nothing in t1, plus one record another producer wrote.
    foreign = digest(b"x", b"v", None, 0)
    m = Matcher({"0@t": [a, foreign, d], "1@t": []})
    for p, t, dg in ((0, "0@t", a), (0, "1@t", c), (0, "0@t", b), (1, "0@t", d)):
        m.add(p, t, dg)
    skips, n_foreign = m.skips()
    assert skips == {(0, "0@t"): 1, (1, "0@t"): 1}
    assert n_foreign == 1


def test_matcher_adds_to_earlier_decisions_and_skips_their_records():
    a, b = digest(b"a", b"1", [("h", b"x")], 0), digest(b"b", b"2", None, 0)
    # An earlier resume decided the first record of (0, t) was written; the tail since then has b.
    m = Matcher({"0@t": [b]}, already={(0, "0@t"): 1})
    m.add(0, "0@t", a)
    assert not m.satisfied
    m.add(0, "0@t", b)
    assert m.satisfied
    assert m.skips() == ({(0, "0@t"): 2}, 0)
    assert decode_skips(encode_skips({(0, "0@t"): 2})) == {(0, "0@t"): 2}


def test_digest_sees_headers_and_timestamps():
    assert digest(b"k", b"v", [("a", b"1")], 0) != digest(b"k", b"v", [("a", b"2")], 0)
    assert digest(b"k", b"v", [], 0) == digest(b"k", b"v", None, 0)
    assert digest(b"k", b"v", None, 1) != digest(b"k", b"v", None, 2)
    assert digest(None, b"v", None, 0) != digest(b"", b"v", None, 0)


def test_checkpoint_round_trip_and_atomic_file(tmp_path):
    path = tmp_path / "cp.json"
    cp = Checkpoint(
        fingerprint=fingerprint({"a": 1}),
        run_id="r",
        source_topic="s",
        ranges={0: [0, 10], 1: [5, 5]},
        next={0: 3, 1: 5},
        scan_from={"0@t": 7},
        skip={"0|0@t": 2},
    )
    cp.save(path)
    back = Checkpoint.load(path)
    assert back == cp and back.remaining() == 7
    assert not list(tmp_path.glob("*.tmp"))
    path.write_text(json.dumps({"format": 99}))
    with pytest.raises(ConfigError, match="unreadable checkpoint"):
        Checkpoint.load(path)
    assert Checkpoint.load(tmp_path / "missing.json") is None
    assert (
        fingerprint({"a": 1, "b": [1]})
        == fingerprint({"b": [1], "a": 1})
        != fingerprint({"a": 2, "b": [1]})
    )
