"""The materializer's side of its gate process (consumer_api.materialize.gate): a `Source` whose
records are the ones the gate passed on, with each partition's position.

The gate is started on the first request and again on the first request after it stopped: a
gate that died makes `take` raise `GateClosed`, the materializer's supervised loop restarts
(counted in `precast_background_restarts_total{part="api-materializer"}`, logged) and assigns
its positions again, which starts a fresh gate from where the view stands. Readings of an older
assignment still in the pipe are dropped (each assignment has an epoch), their counts are not.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections import deque
from typing import Any

from consumer_api.materialize.gate import RELAYED, GateConfig, gate_command
from consumer_api.materialize.source import Taken
from consumer_api.materialize.wire import GateClosed, Pipe
from precast.kafka import Record
from precast.telemetry.relay import CounterRelay
from precast.telemetry.tracing import TRACEPARENT

log = logging.getLogger("precast.api.materializer")

MARKS_PATIENCE_S = 30.0  # the gate itself retries a settling topic for 10 s per partition
STOP_WAIT_S = 10.0  # a stopping gate flushes its dead letters for up to 5 s
EMPTY = Taken([])


class GateFailed(RuntimeError):
    """The gate said why it stopped (a fatal Kafka error, ...)."""


class GateSource:
    def __init__(self, conf: GateConfig, partitions: int) -> None:
        self.conf, self.partitions = conf, partitions
        self.relay = CounterRelay(RELAYED)
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipe: Pipe | None = None
        self._broken = False
        self._closed = False  # stopped for good: a late request must not start another gate
        self._epoch = 0
        self._request = 0
        self._queued: deque[tuple[Any, ...]] = deque()  # readings met while waiting for marks

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- Source ------------------------------------------------------------------------------
    def start(self) -> None:
        if self._proc is None and not self._closed:
            self._spawn()  # ~0.5 s of imports: done while the replica catches up

    def assign(self, positions: dict[int, int], live_from: dict[int, int]) -> None:
        self._epoch += 1
        self._queued.clear()
        self._send(("assign", self._epoch, positions, live_from))

    def high_watermarks(self) -> dict[int, int]:
        self._request += 1
        self._send(("marks", self._request, self.partitions))
        deadline = time.monotonic() + MARKS_PATIENCE_S
        while (frame := self._recv(deadline - time.monotonic())) is not None:
            if frame[0] == "marks" and frame[1] == self._request:
                if frame[2] is None:
                    raise GateFailed(f"watermarks: {frame[3]}")
                return dict(frame[2])
            self._queued.append(frame)
        raise GateFailed(f"no watermarks from the gate in {MARKS_PATIENCE_S:.0f} s")

    def take(self, n: int, timeout: float) -> Taken:
        frame = self._queued.popleft() if self._queued else self._recv(timeout)
        if frame is None or frame[0] != "batch":
            return EMPTY
        _, epoch, records, ends, deltas = frame
        if deltas:
            self.relay.add(deltas)
        if epoch != self._epoch:
            return EMPTY  # read for an assignment since replaced
        topic = self.conf.topic
        return Taken(
            [
                Record(topic, p, o, k, v, [] if trace is None else [(TRACEPARENT, trace)])
                for p, o, k, v, trace in records
            ],
            ends,
        )

    def close(self) -> None:
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if self._pipe is not None and not self._broken:
                self._pipe.send(("stop",))
            proc.wait(STOP_WAIT_S)
        except (GateClosed, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            _close_pipes(proc)

    # -- the process ------------------------------------------------------------------------
    def _send(self, frame: tuple[Any, ...]) -> None:
        if self._closed:
            raise GateClosed("the gate was stopped with its replica")
        if self._proc is None or self._broken or self._proc.poll() is not None:
            self._spawn()
        assert self._pipe is not None
        try:
            self._pipe.send(frame)
        except GateClosed:
            self._broken = True
            raise

    def _recv(self, timeout: float) -> tuple[Any, ...] | None:
        if self._pipe is None or self._broken or self._closed:
            raise GateClosed("no gate process")
        try:
            if not self._pipe.ready(timeout):
                return None
            frame = self._pipe.recv()
        except GateClosed:
            self._broken = True
            raise GateClosed(f"the gate process ended ({self._exit()})") from None
        if frame[0] == "failed":
            self._broken = True
            raise GateFailed(frame[1])
        return frame

    def _exit(self) -> str:
        if self._proc is None:
            return "never started"
        try:
            code = self._proc.wait(1.0)
        except subprocess.TimeoutExpired:
            return "still running, its pipe closed"
        return f"exit status {code}" if code >= 0 else f"signal {-code}"

    def _spawn(self) -> None:
        old, self._proc = self._proc, None
        if old is not None:
            old.kill()
            old.wait()
            _close_pipes(old)
        # A session of its own: its scheduling group can then be lowered without the reads'
        # (precast.priority). Its pipe's end, not the session, tells it that this process died.
        proc = subprocess.Popen(
            [sys.executable, "-c", gate_command(self.conf.nice)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        self._proc, self._broken = proc, False
        self._pipe = Pipe(proc.stdout.fileno(), proc.stdin.fileno())
        self._pipe.send(("config", self.conf))
        log.info("gate process %d started (nice %d)", proc.pid, self.conf.nice)


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()
