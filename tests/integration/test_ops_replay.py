"""`precast replay` against the real broker: exact reproduction, kill -9 and resume, rate
limits, the live-target guard and one-line errors for bad arguments."""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict

import pytest

from opsctl.toolkit.ranges import format_time
from precast.kafka import Consumer
from tests.integration.ops_support import (
    cli_env,
    content,
    end_total,
    precast,
    produce,
    read_all,
    spawn,
)

# Record times an hour back, relative to now: records stamped in the past by more than a topic's
# retention are deleted whenever the broker's retention check runs, even mid-test (a fixed date
# did exactly that once it was 7 days old).
BASE = (int(time.time()) - 3600) * 1000


def _varied(n: int, partitions: int = 3, step_ms: int = 10) -> list[tuple]:
    """Records with the awkward parts a copy must keep: binary values, repeated and empty
    headers, a keyless record, a null value."""
    out = []
    for i in range(n):
        key = None if i == 7 else f"dev-{i % 40:03d}".encode()
        value = (
            None
            if i == 11
            else json.dumps({"kind": "heartbeat" if i % 2 else "alarm", "i": i}).encode()
        )
        if i % 9 == 0:
            value += b"\x00\xff"  # not JSON any more: payload filters must leave it out
        headers = (
            [] if i % 5 == 0 else [("event_id", str(i).encode()), ("dup", b"a"), ("dup", b"b\x00")]
        )
        out.append((i % partitions, key, value, headers, BASE + i * step_ms))
    return out


def _kind(value: bytes | None) -> str | None:
    try:
        return json.loads(value)["kind"] if value else None
    except ValueError:
        return None


@pytest.fixture
def env(kafka_settings, tmp_path):
    return cli_env(kafka_settings, tmp_path / "state")


def test_time_range_replay_reproduces_exactly_the_records_in_range(
    kafka_settings, topic_factory, env
):
    src, dst = topic_factory("rp-src", 3), topic_factory("rp-dst", 3)
    produce(kafka_settings, src, _varied(1500))
    start, end = BASE + 3000, BASE + 9000  # records 300..899
    # The target is reached through its own cluster settings (another spelling of the broker).
    port = kafka_settings.bootstrap_servers.rsplit(":", 1)[1]
    out = precast(
        {**env, "PRECAST_OPS__TARGET_KAFKA__BOOTSTRAP_SERVERS": f"localhost:{port}"},
        "replay",
        src,
        dst,
        "--from",
        format_time(start),
        "--to",
        format_time(end),
        "--keep-timestamps",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr
    source, target = read_all(kafka_settings, src), read_all(kafka_settings, dst)
    for p in range(3):
        expected = [r for r in source[p] if start <= r[4] < end]
        assert len(expected) == 200
        assert content(target[p]) == content(expected)
        assert [r[4] for r in target[p]] == [r[4] for r in expected]
    assert "600" in out.stdout  # the summary's total


def test_dry_run_counts_per_partition_and_writes_nothing(
    kafka_settings, topic_factory, env, tmp_path
):
    src, dst = topic_factory("rp-src", 3), topic_factory("rp-dst", 3)
    records = _varied(600)
    produce(kafka_settings, src, records)
    out = precast(
        env,
        "replay",
        src,
        dst,
        "--offsets",
        "*:0-",
        "--device",
        "dev-001,dev-004",
        "--event-type",
        "heartbeat",
        "--dry-run",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr
    want = defaultdict(int)
    for p, key, value, _h, _t in records:
        if key in (b"dev-001", b"dev-004") and _kind(value) == "heartbeat":
            want[p] += 1
    lines = {ln.split()[0]: ln.split() for ln in out.stdout.splitlines() if ln.split()}
    for p in range(3):
        assert lines[str(p)][2:] == ["200", str(want[p])]
    assert end_total(kafka_settings, dst) == 0
    assert not (tmp_path / "state").exists()


def _kill_mid_chunk(proc, state_dir, kafka_settings, dst: str) -> None:
    """SIGKILL the replay at a moment when it has written records its checkpoint does not
    cover yet (checked while the process is stopped, so nothing moves in between)."""
    from precast.kafka import Admin

    admin = Admin(kafka_settings)
    n = admin.topic_partitions()[dst]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"replay ended before it could be killed: {proc.communicate()}")
        files = list(state_dir.glob("replay-*.json"))
        if files:
            proc.send_signal(signal.SIGSTOP)
            cp = json.loads(files[0].read_text())
            ends = admin.end_offsets([(dst, p) for p in range(n)])
            unaccounted = sum(ends.values()) - sum(cp["scan_from"].values())
            if cp["written"] > 0 and unaccounted > 50:
                proc.kill()
                proc.communicate()
                return
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    proc.kill()
    proc.communicate()
    raise AssertionError("never caught the replay between two checkpoints")


@pytest.mark.parametrize("layout", ["same-partitions", "by-key-filtered"])
def test_kill_9_then_resume_writes_everything_once(
    kafka_settings, topic_factory, env, tmp_path, layout
):
    src = topic_factory("rp-src", 3)
    dst = topic_factory("rp-dst", 3 if layout == "same-partitions" else 2)
    records = _varied(9000)
    produce(kafka_settings, src, records)
    args = ["replay", src, dst, "--offsets", "*:0-", "--no-progress"]
    if layout == "by-key-filtered":
        args += ["--event-type", "heartbeat"]
    slow = {**env, "PRECAST_OPS__CHUNK_SECONDS": "0.4", "PRECAST_OPS__CHUNK_RECORDS": "1500"}
    proc = spawn(slow, *args, "--rate", "3000")
    _kill_mid_chunk(proc, tmp_path / "state", kafka_settings, dst)

    resumed = precast(slow, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout
    skipped = int(resumed.stdout.split("resumed, ")[1].split()[0].replace(",", ""))
    assert skipped > 0  # the crashed run had written past its checkpoint, and none was rewritten

    source, target = read_all(kafka_settings, src), read_all(kafka_settings, dst)
    if layout == "same-partitions":
        for p in range(3):
            assert content(target[p]) == content(source[p])
    else:

        def per_key(parts):
            seq = defaultdict(list)
            for recs in parts.values():
                for _o, k, v, h, _t in recs:
                    seq[k].append((v, h))
            return seq

        want = per_key(
            {p: [r for r in recs if _kind(r[2]) == "heartbeat"] for p, recs in source.items()}
        )
        got = per_key(target)
        assert sum(map(len, got.values())) == sum(map(len, want.values())) > 3000
        assert got == want  # every record once, and each device's records in their order

    again = precast(env | slow, *args)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_rate_limit_is_kept(kafka_settings, topic_factory, env):
    src, dst = topic_factory("rp-src", 3), topic_factory("rp-dst", 3)
    n, rate = 2400, 1200.0
    produce(kafka_settings, src, _varied(n))
    out = precast(
        env, "replay", src, dst, "--offsets", "*:0-", "--rate", str(rate), "--no-progress"
    )
    assert out.returncode == 0, out.stderr
    stamps = sorted(r[4] for recs in read_all(kafka_settings, dst).values() for r in recs)
    assert len(stamps) == n
    _kept_schedule(stamps, [stamps[0] + i * 1000 / rate for i in range(n)])


def _kept_schedule(stamps: list[int], due: list[float]) -> None:
    """Written records' times against their schedule (ms). None early: no stretch of the run
    goes faster than asked. And no drift: a pacer that falls behind its schedule (sleeping a
    period per record, say) is late by more and more, so even the most punctual record of the
    second half is late; a busy machine only stalls the run for a while, and the absolute
    schedule catches up after a stall, so some record of the second half is on time anyway."""
    lateness = [s - d for s, d in zip(stamps, due, strict=True)]
    early = [x for x in lateness if x < -4]  # 2 ms sleeps skipped, ms stamps
    assert not early, f"{len(early)} records ahead of schedule, up to {-min(early):.0f} ms"
    best_late = min(lateness[len(lateness) // 2 :])
    assert best_late <= 20, f"every record of the second half late by {best_late:.0f} ms or more"


def test_speed_factor_follows_original_timing(kafka_settings, topic_factory, env):
    src, dst = topic_factory("rp-src", 1), topic_factory("rp-dst", 1)
    produce(kafka_settings, src, _varied(1000, partitions=1, step_ms=3))  # 2.997 s of history
    out = precast(env, "replay", src, dst, "--offsets", "0:0-", "--speed", "1.5", "--no-progress")
    assert out.returncode == 0, out.stderr
    stamps = [r[4] for r in read_all(kafka_settings, dst)[0]]
    assert len(stamps) == 1000
    _kept_schedule(stamps, [stamps[0] + i * 3 / 1.5 for i in range(1000)])


@pytest.mark.parametrize(
    "case",
    [
        ("--from", "2025-06-01T10:00:00Z", "--to", "2025-06-01T09:00:00Z"),
        ("--offsets", "0:500-100"),
        ("--from", "2025-13-45T99:00:00Z"),
        ("--from", "last tuesday"),
        ("--offsets", "7:0-10"),
        ("--offsets", "0:0-10", "--rate", "0"),
        ("UNKNOWN-SOURCE", "--offsets", "0:0-10"),
        ("UNKNOWN-TARGET", "--offsets", "0:0-10"),
    ],
    ids=[
        "reversed-time",
        "reversed-offsets",
        "bad-date",
        "not-a-time",
        "no-such-partition",
        "zero-rate",
        "unknown-source",
        "unknown-target",
    ],
)
def test_bad_arguments_fail_with_one_line_and_write_nothing(
    kafka_settings, topic_factory, env, tmp_path, case
):
    src, dst = topic_factory("rp-src", 3), topic_factory("rp-dst", 3)
    produce(kafka_settings, src, _varied(30))
    args = list(case)
    s, d = src, dst
    if args[0] == "UNKNOWN-SOURCE":
        s, args = src + "-missing", args[1:]
    elif args[0] == "UNKNOWN-TARGET":
        d, args = dst + "-missing", args[1:]
    out = precast(env, "replay", s, d, *args, "--no-progress")
    assert out.returncode != 0
    assert out.stderr.startswith("precast: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert end_total(kafka_settings, dst) == 0
    assert not (tmp_path / "state").exists()


def test_refuses_a_live_input_topic_unless_allowed(kafka_settings, topic_factory, env, unique):
    src, dst = topic_factory("rp-src", 3), topic_factory("rp-dst", 3)
    produce(kafka_settings, src, _varied(90))
    live = Consumer(kafka_settings, unique("live-group"))
    live.subscribe([dst])
    deadline = time.monotonic() + 30
    while not live.assignment() and time.monotonic() < deadline:
        live.consume(10, 0.2)
    try:
        refused = precast(env, "replay", src, dst, "--offsets", "*:0-", "--no-progress")
        assert refused.returncode == 2
        assert (
            "refusing to write into live input topic" in refused.stderr
            and live.group_id in refused.stderr
        )
        assert end_total(kafka_settings, dst) == 0
        allowed = precast(
            env, "replay", src, dst, "--offsets", "*:0-", "--allow-live-target", "--no-progress"
        )
        assert allowed.returncode == 0, allowed.stderr
        assert end_total(kafka_settings, dst) == 90
    finally:
        live.close()


def test_the_guard_sees_assign_based_readers_through_their_presence(
    kafka_settings, topic_factory, topics, tmp_path
):
    """A reader that assigns partitions (API materializer, board feed, auditor) is in no
    consumer group: its presence record is what the guard sees; its tombstone clears it."""
    from opsctl.toolkit.write_guard import present_readers
    from precast.kafka import Admin
    from precast.presence import Presence
    from precast.settings import TopicSettings

    src, dst = topic_factory("rp-src", 3), topic_factory("rp-dst", 3)
    produce(kafka_settings, src, _varied(30))
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=prefix,
        PRECAST_TOPICS__PARTITIONS="3",
    )
    reader = Presence(kafka_settings, topics.presence.name, "api", [dst], interval_s=0.5).start()
    try:
        deadline = time.monotonic() + 20
        seen = TopicSettings(prefix=prefix, partitions=3)
        while reader.instance not in {
            r.instance for r in present_readers(Admin(kafka_settings), seen)
        }:
            assert time.monotonic() < deadline, "the presence record never arrived"
            time.sleep(0.2)
        refused = precast(env, "replay", src, dst, "--offsets", "*:0-", "--no-progress")
        assert refused.returncode == 2, refused.stdout
        assert "assign-based reader" in refused.stderr and reader.instance in refused.stderr
        assert refused.stderr.count("\n") == 1
        assert end_total(kafka_settings, dst) == 0
    finally:
        reader.stop()
    allowed = precast(env, "replay", src, dst, "--offsets", "*:0-", "--no-progress")
    assert allowed.returncode == 0, allowed.stderr
    assert end_total(kafka_settings, dst) == 30
