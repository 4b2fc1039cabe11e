"""bench cluster names the stage that stood still after a broker kill: the first along the answer
path that made no progress for half the bound, from sampled counters (issue 36)."""

from bench.cluster_stalls import BOUND_S, StallWatch, name_stall, stalls


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

    from bench import cluster_stalls

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
