"""bench cluster names the stage that stood still after a broker kill: the first along the answer
path that made no progress for half the bound, from sampled counters (issue 36)."""

from bench.support.parts.cluster_stalls import BOUND_S, StallWatch, name_stall, stalls


def _watch(counter: list[tuple[float, float]], wait: list[tuple[float, float]]) -> StallWatch:
    w = StallWatch({"worker consume": lambda: None}, {"worker produce": lambda: None})
    w.series = {"worker consume": counter, "worker produce": wait}
    return w


def test_a_counter_that_stops_growing_stood_still_that_long():
    # grows every 0.25 s, then nothing from t=2 to t=8, then grows again
    xs = [(t / 4, float(t)) for t in range(9)]
    xs += [(t / 4, 8.0) for t in range(9, 32)] + [(8.0, 9.0), (8.25, 10.0)]
    w = _watch(xs, [(0.0, 0.0), (9.0, 0.0)])
    assert w.idle("worker consume", 0.0, 9.0) == 6.0


def test_a_wait_counter_growing_at_wall_speed_is_a_blocked_stage():
    blocked = [(t / 4, 0.0) for t in range(5)] + [(1.0 + t / 4, t / 4) for t in range(1, 13)]
    w = _watch([(0.0, 0.0), (5.0, 1.0)], blocked)  # waits from t=1 to t=4
    assert w.blocked("worker produce", 0.0, 5.0) == 3.0


def test_answers_within_the_bound_name_nothing():
    assert name_stall(BOUND_S - 0.1, {"worker consume": 9.0}) is None


def test_the_first_stage_along_the_path_is_named_not_the_longest():
    # a worker waiting on its outputs consumes nothing: produce is the cause, consume follows
    stood = {"bench load": 1.0, "worker produce": 6.0, "worker consume": 8.0, "bench reader": 9}
    assert name_stall(12.0, stood) == "worker produce"
    assert name_stall(None, {"bench load": 7.0, "worker consume": 8.0}) == "bench load"


def test_without_a_long_stall_the_longest_is_named():
    assert name_stall(11.0, {"worker consume": 2.0, "API reader": 4.5, "bench reader": None}) == (
        "API reader"
    )


def test_stalls_combines_the_watch_with_the_benchs_own_tails():
    w = _watch([(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)], [(0.0, 0.0), (2.0, 0.0)])
    out = stalls(w, {"bench reader": 1.234}, 0.0, 2.0)
    assert out == {"bench reader": 1.23, "worker consume": 1.0, "worker produce": 0.0}


def test_metric_total_sums_the_matching_samples_of_one_metric(monkeypatch):
    import io

    from bench.support.parts import cluster_stalls

    text = (
        "# HELP precast_worker_stage_seconds_total wall time\n"
        "# TYPE precast_worker_stage_seconds_total counter\n"
        'precast_worker_stage_seconds_total{stage="commit"} 1.5\n'
        'precast_worker_stage_seconds_total{stage="produce"} 2.0\n'
        'precast_worker_stage_seconds_total_created{stage="commit"} 1.7e9\n'
        'precast_worker_events_total{topic="a.heartbeats"} 10.0\n'
        'precast_worker_events_total{topic="a.alarms"} 3.0\n'
        "precast_api_materialized_total 7.0\n"
    )
    monkeypatch.setattr(
        cluster_stalls.urllib.request, "urlopen", lambda *_a, **_k: io.BytesIO(text.encode())
    )
    total = cluster_stalls.metric_total
    assert total(1, "precast_worker_stage_seconds_total", {"stage": "commit"}) == 1.5
    assert total(1, "precast_worker_stage_seconds_total") == 3.5  # not the _created sample
    assert total(1, "precast_worker_events_total", {"topic": "a.heartbeats"}) == 10.0
    assert total(1, "precast_api_materialized_total") == 7.0
    assert total(1, "precast_missing_total") == 0.0


class _Msg:
    def __init__(self, key: bytes, value: bytes) -> None:
        self._k, self._v = key, value

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes:
        return self._v


def test_the_answers_tail_survives_a_lease_and_a_record_it_cannot_time():
    """A validity lease (no computed_at_ms) ended the tail's thread with a KeyError, and with it
    every answer the benchmark saw: the issue's 'no answer within 90 s' (issue 36)."""
    from bench.support.parts.cluster_procs import PostFaultTail
    from precast.settings import KafkaSettings
    from schemas.leases import LEASE_KEY_PREFIX

    tail = PostFaultTail(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "p", predictions=True)
    try:
        assert tail._stamp(_Msg(LEASE_KEY_PREFIX + b"3", b'{"until_ms": 5}')) is None
        assert tail._stamp(_Msg(b"dev-1", b'{"device_id": "dev-1"}')) is None
        assert tail._stamp(_Msg(b"dev-1", b"not json")) is None
        assert tail.unreadable == 2
        assert tail._stamp(_Msg(b"dev-1", b'{"computed_at_ms": 1234}')) == 1234
    finally:
        tail.c.close()


class _Tail:
    def __init__(self, arrivals: list[float]) -> None:
        self.arrivals = arrivals

    def longest_gap(self, start: float, end: float) -> float:
        times = [start, *(t for t in self.arrivals if start < t < end), end]
        return max(b - a for a, b in zip(times, times[1:], strict=False))


def test_stages_idle_after_the_load_ended_are_not_a_stall():
    from bench.support.parts.cluster_stalls import after_kill

    steady = [(t / 4, float(t)) for t in range(0, 81)]  # grows until t=20, then the window ends
    w = _watch(steady[:41] + [(t / 4, 40.0) for t in range(41, 361)], [(0.0, 0.0), (90.0, 0.0)])
    inputs = _Tail([t / 4 for t in range(1, 41)])  # the load sent until t=10
    answers = _Tail([t / 4 for t in range(1, 41)])
    still, named = after_kill(w, 3.0, inputs, answers, 0.0, 90.0, load_ended=10.0)
    assert still["bench load"] == 0.25 and still["worker consume"] == 0.25
    assert named == "brokers"  # nothing stood still for 5 s: the longest, the fencing's 3 s
    stuck = _Tail([0.25, 0.5])  # the benchmark's own answers tail stopped reading at t=0.5
    still, named = after_kill(w, 3.0, inputs, stuck, 0.0, 90.0, load_ended=10.0)
    assert named == "bench reader" and still["bench reader"] == 9.5
