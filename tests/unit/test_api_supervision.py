"""Every background part of the read API and of the probe server runs under precast.supervise:
a part that raises is restarted (counted), one that keeps raising turns readiness false and
ends the process (here: a recorded give-up instead of SIGTERM). Also the probe server's own
bounds: silent connections are closed, and connections past its bound get no thread."""

from __future__ import annotations

import socket
import sys
import threading
import time
import urllib.request

import pytest
from starlette.testclient import TestClient

import consumer_api.app as app_module
import precast.http.reaper as reaper_module
import precast.telemetry.endpoints as obs
from precast.http.parts import PARTS
from precast.http.parts import down as parts_down
from precast.supervise import Supervised
from tests.api_fixtures import make_app, make_service


def _until(cond, what: str, limit_s: float = 20.0) -> None:
    """Wait for a state the code under test reaches by itself (a bound, not a timing)."""
    end = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never: {what}")
        time.sleep(0.01)


@pytest.fixture
def gave_up(monkeypatch):
    """The app's give-ups recorded instead of ending the test process; restarts quick."""
    seen: list[str] = []
    monkeypatch.setattr(app_module, "_give_up", lambda part, exc: seen.append(part))
    monkeypatch.setattr(
        app_module, "SUPERVISE", {"max_restarts": 2, "window_s": 60.0, "backoff_s": 0.01}
    )
    return seen


class Boom:
    def __init__(self, times: int) -> None:
        self.left, self.calls = times, 0

    def __call__(self, *_a, **_k):
        self.calls += 1
        if self.left:
            self.left -= 1
            raise RuntimeError("boom")


def _part(svc, name):
    return next(p for p in svc.parts if p.part == name)


@pytest.mark.parametrize("name", ["api-poll", "api-hints", "api-tokens"])
def test_an_api_task_that_raises_restarts_counted(name, gave_up, monkeypatch):
    svc = make_service(hint_interval_s=0.01)
    boom = Boom(1)
    _break(svc, name, boom, monkeypatch)
    with TestClient(make_app(svc)) as client:
        _until(lambda: svc.parts and _part(svc, name).restarts == 1, f"{name} restarted")
        _until(lambda: boom.calls >= 2, f"{name} runs again after its restart")
        assert client.get("/readyz").status_code == 200
    assert not gave_up


@pytest.mark.parametrize("name", ["api-poll", "api-hints", "api-tokens"])
def test_an_api_task_that_keeps_raising_turns_readiness_false_and_gives_up(
    name, gave_up, monkeypatch
):
    svc = make_service(hint_interval_s=0.01)
    _break(svc, name, Boom(10**9), monkeypatch)
    with TestClient(make_app(svc)) as client:
        _until(lambda: gave_up == [name], f"{name} gave up")
        r = client.get("/readyz")
        assert r.status_code == 503 and name in r.json()["down"]


def _break(svc, name, boom, monkeypatch):
    if name == "api-poll":
        monkeypatch.setattr(svc.asker, "poll", boom)
    elif name == "api-hints":

        class Hints:
            flush = boom

            def note(self, _d):
                return None

        svc.hints = Hints()
    else:
        monkeypatch.setattr(app_module, "TOKENS_RELOAD_S", 0.01)
        monkeypatch.setattr(app_module, "reload_tokens", boom)


# -- the probe server --------------------------------------------------------------------------
def _get(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status


def test_the_probe_thread_restarts_counted_when_serving_raises(monkeypatch):
    calls = Boom(1)
    real = obs._BoundedServer.serve_forever

    def flaky(self, poll_interval=0.5):
        calls()
        return real(self, poll_interval)

    monkeypatch.setattr(obs._BoundedServer, "serve_forever", flaky)
    probe = obs.ProbeServer("127.0.0.1", 0).start()
    try:
        _until(lambda: probe.supervised.restarts == 1, "probe restarted")
        _until(lambda: calls.calls == 2, "probe serving again")
        assert _get(probe.port, "/healthz") == 200 and probe.healthy
    finally:
        probe.stop()


def test_a_silent_probe_connection_is_closed(monkeypatch):
    monkeypatch.setattr(obs, "TIMEOUT_S", 0.2)
    probe = obs.ProbeServer("127.0.0.1", 0).start()
    try:
        with socket.create_connection(("127.0.0.1", probe.port)) as s:
            s.settimeout(30)  # only a safety net: the server closes it long before
            assert s.recv(1) == b""  # closed by the server, not answered
    finally:
        probe.stop()


def test_probe_connections_past_the_bound_get_no_thread(monkeypatch):
    monkeypatch.setattr(obs, "MAX_CONNECTIONS", 2)
    probe = obs.ProbeServer("127.0.0.1", 0).start()
    held = [socket.create_connection(("127.0.0.1", probe.port)) for _ in range(2)]
    try:
        _until(lambda: probe._server._slots._value == 0, "both connections hold a thread")
        with socket.create_connection(("127.0.0.1", probe.port)) as extra:
            extra.settimeout(30)
            assert extra.recv(1) == b""  # refused at once
        for s in held:
            s.close()
        _until(lambda: probe._server._slots._value == 2, "slots back")
        assert _get(probe.port, "/metrics") == 200
    finally:
        for s in held:
            s.close()
        probe.stop()


# -- the idle-connection reaper ------------------------------------------------------------------
def test_the_reaper_restarts_counted_and_its_give_up_reaches_readiness(monkeypatch):
    boom = Boom(10**9)
    monkeypatch.setattr(reaper_module, "sweep", boom)
    gave_up = threading.Event()
    part = Supervised(
        "idle-reaper", max_restarts=2, backoff_s=0.01, on_give_up=lambda p, e: gave_up.set()
    )
    reaper = reaper_module.Reaper(1, 0.1, supervised=part)
    reaper.every_s = 0.01
    reaper.start()
    try:
        if not any(p is part for p in PARTS):
            pytest.skip("the reaper runs on Linux only")
        _until(gave_up.is_set, "reaper gave up")
        assert part.restarts == 2 and "idle-reaper" in parts_down([])
        client = TestClient(make_app(make_service()))
        r = client.get("/readyz")
        assert r.status_code == 503 and "idle-reaper" in r.json()["down"]
    finally:
        reaper.stop()
    assert "idle-reaper" not in parts_down([])


def test_the_presence_publisher_restarts_counted_when_it_raises():
    from precast.presence import Presence
    from precast.settings import KafkaSettings

    p = Presence(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "t.presence", "api", ["x"], 0.01)
    boom = Boom(1)
    p._producer.produce = boom  # not a KafkaFailure: what used to end the thread for good
    p._producer.poll = lambda _t: 0
    p.supervised._backoff = 0.01
    p.start()
    try:
        _until(lambda: p.supervised.restarts == 1 and boom.calls >= 2, "presence runs again")
        assert p.supervised.healthy
    finally:
        p._stop.set()
        p._thread.join(5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names in /proc")
def test_a_supervised_thread_carries_its_part_as_its_os_name():
    """`top -H` and the benchmarks find a background thread by its name (15 bytes at most)."""
    stop = threading.Event()
    t = Supervised("api-materializer").thread(stop.wait, stop)
    t.start()
    try:
        deadline = time.monotonic() + 5
        while True:
            with open(f"/proc/self/task/{t.native_id}/comm") as f:
                if f.read().strip() == "api-materialize":
                    break
            assert time.monotonic() < deadline, "the thread kept the process's name"
            time.sleep(0.01)
    finally:
        stop.set()
        t.join(5)
