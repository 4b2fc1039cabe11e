"""Purges sent to edge caches: `PURGE /` with an `xkey-purge: k1 k2 ...` header to every node
(deploy/edge/precast.vcl answers `200 purged N`), or `xkey-softpurge` for a soft purge (the
copy stays usable for its grace, at most 0.5 s, while one background fetch replaces it). Two
users:

- `EdgePurge.purge(keys)`: one call, every node, every key (`precast purge`: hard);
- `NewestPurger`: an API replica's background batcher. The materializer hands it the devices
  whose stored answer changed (a newer answer, a purge marker); every `purge_interval_ms` it
  soft-purges their `d:` keys, so the edge serves no answer older than the newest by more than
  that interval plus one round trip plus the grace once the replica has stored the newer one
  (each replica purges after its own store, so a copy fetched from a replica that lags is
  purged when it catches up). A purge marker's device, leased copies whose lease would lapse
  (`lp:`) and everything (`precast`) are purged hard: they must not be served at all.

A node that cannot be reached keeps its keys pending (retried next round, deduplicated; past
`MAX_PENDING` keys they collapse into the one key `precast`, everything: correct and bounded).
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from prometheus_client import Counter, Gauge

from precast.edge_cache.keys import ALL, device_key
from precast.hygiene import printable
from precast.serving.leases import Lease
from precast.settings import EdgeSettings
from precast.supervise import Supervised

log = logging.getLogger("precast.edge_cache")

PURGES = Counter(
    "precast_edge_purges_total", "purge requests sent to edge nodes", ["source", "result"]
)
PURGED_KEYS = Counter(
    "precast_edge_purged_keys_total", "surrogate keys purged at the edge", ["source"]
)
PURGED_OBJECTS = Counter(
    "precast_edge_purged_objects_total", "cached objects the edge said a purge removed", ["source"]
)
LEASE_PURGES = Counter(
    "precast_edge_lease_purges_total",
    "partitions whose leased edge copies a replica purged (lapsing: no newer lease within the "
    "guard; generation: a new owner)",
    ["reason"],
)
PENDING = Gauge("precast_edge_purge_pending_keys", "device keys waiting for the next edge purge")

HEADER, SOFT_HEADER = "xkey-purge", "xkey-softpurge"
MAX_HEADER = 6000  # bytes of keys per request (Varnish's default header limit is 8 KB)
MAX_PENDING = 50_000
DEVICE = device_key("")  # the prefix of every device's key: soft-purged
LAPSE_TAIL_MS = 1_000  # a lapsing partition's copies are purged each round until this past its end


def batches(keys: Iterable[str], limit: int = MAX_HEADER) -> list[str]:
    """Space-joined header values of at most `limit` bytes (a key alone is never split)."""
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for k in keys:
        if cur and size + 1 + len(k) > limit:
            out.append(" ".join(cur))
            cur, size = [], 0
        cur.append(k)
        size += len(k) + (1 if size else 0)
    if cur:
        out.append(" ".join(cur))
    return out


def split(keys: set[str], marked: set[str]) -> tuple[list[str], list[str]]:
    """(hard, soft) purges of a round: device keys soft unless `marked` (purge markers'),
    everything else hard (lapsing leases' `lp:`, `precast`), which goes first."""
    if ALL in keys:
        return [ALL], []
    hard = sorted(k for k in keys if not k.startswith(DEVICE) or k in marked)
    soft = sorted(k for k in keys if k.startswith(DEVICE) and k not in marked)
    return hard, soft


@dataclass
class NodeResult:
    url: str
    purged: int = 0  # objects the node says it removed
    error: str | None = None


@dataclass
class PurgeReport:
    nodes: list[NodeResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(n.error is None for n in self.nodes)

    @property
    def purged(self) -> int:
        return sum(n.purged for n in self.nodes)


class _Node:
    """One edge node with a kept-alive connection (reopened after any error)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        self.url = url
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self._timeout = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        return self._conn

    def purge(self, value: str, soft: bool = False) -> int:
        """Objects removed; raises OSError/HTTPException/ValueError when the node refused."""
        conn = self._connection()
        try:
            conn.request("PURGE", "/", headers={SOFT_HEADER if soft else HEADER: value})
            resp = conn.getresponse()
            body = resp.read(512)
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if resp.status != 200:
            self.close()
            raise ValueError(f"HTTP {resp.status} {printable(body.decode(errors='replace'), 120)}")
        # deploy/edge/precast.vcl answers "purged N"
        words = body.split()
        return int(words[-1]) if words and words[-1].isdigit() else 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class EdgePurge:
    """Purges by surrogate key on every configured edge node."""

    def __init__(self, settings: EdgeSettings, source: str) -> None:
        self.source = source
        self._nodes = [_Node(u, settings.purge_timeout_s) for u in settings.purge_urls]

    def purge(self, keys: Sequence[str], soft: bool = False) -> PurgeReport:
        report = PurgeReport()
        values = batches(keys)
        for node in self._nodes:
            result = NodeResult(node.url)
            try:
                for value in values:
                    result.purged += node.purge(value, soft)
                PURGES.labels(self.source, "ok").inc(len(values))
            except (OSError, http.client.HTTPException, ValueError) as exc:
                result.error = printable(f"{type(exc).__name__}: {exc}", 200)
                PURGES.labels(self.source, "failed").inc()
            report.nodes.append(result)
            PURGED_OBJECTS.labels(self.source).inc(result.purged)
        if report.ok:
            PURGED_KEYS.labels(self.source).inc(len(keys))
        return report

    def close(self) -> None:
        for n in self._nodes:
            n.close()


class NewestPurger:
    """The API replica's batcher (module docstring). `note(items)` is the materializer's
    `on_stored` hook: (device_id, entry) pairs it stored as the newest."""

    def __init__(
        self,
        edge: EdgePurge,
        interval_ms: int,
        ready: Callable[[], bool] = lambda: True,
        *,
        purge_all_when_ready: bool = True,
        leases: Callable[[], list[Lease]] | None = None,
        lease_guard_ms: int = 200,
    ) -> None:
        self.edge = edge
        self._ready = ready
        self._was_ready = False
        self._purge_all_when_ready = purge_all_when_ready
        self._leases, self._guard = leases, lease_guard_ms
        self._generation: dict[int, int] = {}  # partition -> generation of its newest lease
        self._lapsing: set[tuple[int, int, int]] = set()  # lapses counted
        self._next_lapse_ms: int | None = None  # the earliest lease's end less the guard
        self._interval = interval_ms / 1000
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._hard: set[str] = set()  # device keys of purge markers among the pending
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.supervised = Supervised("edge-purger")
        self._last_error: str | None = None

    def note(self, items: Iterable[tuple[str, object]]) -> None:
        """A purge marker's device is purged hard: a purged answer is not served once more."""
        with self._lock:
            pending = self._pending
            for d, e in items:
                key = device_key(d)
                pending.add(key)
                if getattr(e, "purge", False):
                    self._hard.add(key)
            if len(pending) > MAX_PENDING:
                self._pending, self._hard = {ALL}, set()
            PENDING.set(len(self._pending))

    @property
    def leases_watched(self) -> bool:
        """Leased answers may stay at the edge past their current validity (PRECAST_EDGE__
        LEASE_TTL_S): this replica purges them before a lease would lapse."""
        return self._leases is not None

    def watch_leases(self, leases: list[Lease], now_ms: int) -> None:
        """Copies an edge keeps of leased answers (`lp:<partition>`, PRECAST_EDGE__LEASE_TTL_S)
        are valid only while leases keep coming: purge a partition's copies when its newest
        lease is within the guard of its end (no newer one came in time) or changed generation
        (a new owner's leases need not extend the old owner's answers). A lapsing partition is
        purged again every round until a second past its lease's end: a copy whose fetch
        began before the guard but reached the edge after the first purge goes with the next."""
        keys: list[str] = []
        self._next_lapse_ms = None
        for x in leases:
            seen = self._generation.get(x.partition)
            self._generation[x.partition] = x.generation
            left = x.valid_until_ms - now_ms
            if seen is not None and seen != x.generation:
                keys.append(f"lp:{x.partition}")
                LEASE_PURGES.labels("generation").inc()
            elif -LAPSE_TAIL_MS < left <= self._guard:
                keys.append(f"lp:{x.partition}")
                lapse = (x.partition, x.generation, x.certified_at_ms)
                if lapse not in self._lapsing:
                    self._lapsing.add(lapse)
                    LEASE_PURGES.labels("lapsing").inc()
            elif left > self._guard:  # when to look again if no newer lease comes
                at = x.valid_until_ms - self._guard
                if self._next_lapse_ms is None or at < self._next_lapse_ms:
                    self._next_lapse_ms = at
        if len(self._lapsing) > 10_000:  # leases long replaced
            self._lapsing.clear()
        if keys:
            with self._lock:
                self._pending.update(keys)

    def note_all(self) -> None:
        """Everything: a replica that was not storing may have missed newer answers."""
        with self._lock:
            self._pending, self._hard = {ALL}, set()

    def run_once(self) -> PurgeReport | None:
        if not self._was_ready:
            # Until the replica has loaded the topic it answers nothing, so nothing it could
            # purge matters; once loaded, the edge may hold copies older than what the load
            # found (made while no replica was storing): purge them all, once.
            if not self._ready():
                return None
            self._was_ready = True
            if self._purge_all_when_ready:
                self.note_all()
        if self._leases is not None:
            self.watch_leases(self._leases(), int(time.time() * 1000))
        with self._lock:
            keys, self._pending = self._pending, set()
            marked, self._hard = self._hard, set()
        if not keys:
            return None
        hard, soft = split(keys, marked)
        report = PurgeReport()
        for ordered, is_soft in ((hard, False), (soft, True)):
            if ordered:
                report.nodes += self.edge.purge(ordered, soft=is_soft).nodes
        if not report.ok:
            with self._lock:
                self._pending.update(k for k in hard + soft if k != ALL)
                self._hard.update(k for k in hard if k.startswith(DEVICE))
            if ALL in keys:
                self.note_all()
            error = "; ".join(f"{n.url}: {n.error}" for n in report.nodes if n.error)
            if error != self._last_error:  # one line per distinct failure, not per round
                log.warning("edge purge failed, keys kept for the next round: %s", error)
            self._last_error = error
        elif self._last_error is not None:
            log.info("edge purges succeed again")
            self._last_error = None
        with self._lock:
            PENDING.set(len(self._pending))
        return report

    def _run(self) -> None:
        # Every interval, and at the moment a lease would enter its guard: the lapse purge
        # is then sent on time (not up to an interval late), so the guard needs no room for it.
        while not self._stop.wait(self._wait_s()):
            self.run_once()

    def _wait_s(self) -> float:
        at = self._next_lapse_ms
        if at is None:
            return self._interval
        return min(self._interval, max(0.002, (at - time.time() * 1000) / 1000))

    def start(self) -> None:
        self._thread = self.supervised.thread(self._run, self._stop)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.run_once()  # what the last interval gathered
        self.edge.close()
