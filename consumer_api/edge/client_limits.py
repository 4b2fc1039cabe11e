"""Per-client limits of one replica: rates as token buckets, open event streams as counts.

A client is its bearer token and its address (`PRECAST_API__CLIENT_KEY`): each has its own
allowance, so one token shared by many addresses, or many tokens from one address, are both
held. Tables are bounded (`max_clients`, least recent forgotten): a flood of new addresses costs
memory once, never without end. Everything runs on the event loop, so a check and its count
happen with no await between them (nothing to race)."""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from prometheus_client import Counter
from starlette.requests import HTTPConnection

from consumer_api.settings import ApiOptions
from precast.tokens import TokenTable, bearer, digest

LIMITED = Counter(
    "precast_api_client_limited",
    "requests refused by a per-client limit (429), by limit",
    ["limit"],
)


class TokenBucket:
    """`rate` tokens a second up to `burst`; `take(n)` says how long to wait when it cannot."""

    __slots__ = ("at", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self, n: float, now: float) -> float:
        """0.0 and the tokens taken, or the seconds until `n` would be there (nothing taken)."""
        self.refill(now)
        if self.tokens >= n:
            self.tokens -= n
            return 0.0
        return (min(n, self.burst) - self.tokens) / self.rate


class Buckets:
    """One bucket per client key, bounded (LRU)."""

    def __init__(
        self, rate: float, burst: float, max_keys: int, clock: Callable[[], float]
    ) -> None:
        self.rate, self.burst, self.max_keys, self._clock = rate, burst, max_keys, clock
        self._b: OrderedDict[str, TokenBucket] = OrderedDict()

    def take(self, keys: list[str], n: float) -> float:
        """Take `n` from every key's bucket, or from none: the longest wait when one is short."""
        n = min(
            n, self.burst
        )  # a request larger than the burst takes all of it, never waits forever
        now = self._clock()
        buckets = [self._bucket(k, now) for k in keys]
        for b in buckets:
            b.refill(now)
        waits = [(min(n, b.burst) - b.tokens) / b.rate for b in buckets if b.tokens < n]
        if waits:
            return max(waits)
        for b in buckets:
            b.tokens -= n
        return 0.0

    def _bucket(self, key: str, now: float) -> TokenBucket:
        b = self._b.get(key)
        if b is None:
            b = self._b[key] = TokenBucket(self.rate, self.burst, now)
            if len(self._b) > self.max_keys:
                self._b.popitem(last=False)
        else:
            self._b.move_to_end(key)
        return b


class ClientLimits:
    def __init__(
        self,
        opts: ApiOptions,
        clock: Callable[[], float] = time.monotonic,
        tokens: TokenTable | None = None,
    ) -> None:
        self.opts, self._tokens = opts, tokens
        self.prefetch = Buckets(
            opts.client_prefetch_per_s, opts.client_prefetch_burst, opts.max_clients, clock
        )
        self.beacons = Buckets(
            opts.client_beacons_per_s, opts.client_beacon_burst, opts.max_clients, clock
        )
        self._streams: dict[str, int] = {}
        self._proxies = proxy_networks(opts.trusted_proxies)

    def keys(self, conn: HTTPConnection) -> list[str]:
        """The client's keys: `t:<its token's identity>` and `a:<address>`. A token is known by
        its digest after the normalization the lookup applies (scheme case, whitespace), so
        one token is one client however its header is spelled."""
        out = []
        how = self.opts.client_key
        if how != "address":
            raw = conn.headers.get("authorization", "").encode()
            token = bearer(raw)
            if token is not None:
                known = self._tokens.lookup(raw) if self._tokens is not None else None
                ident = known.digest if known is not None else digest(token)
                out.append("t:" + ident[:8].hex())
        if how != "token":
            out.append("a:" + self.address(conn))
        return out or ["a:-"]

    def address(self, conn: HTTPConnection) -> str:
        """The peer's address; behind trusted proxies (peers inside the `trusted_proxies`
        ranges), the address the outermost of them saw: X-Forwarded-For read from the right,
        past every entry that is itself a trusted proxy (an edge cache behind the TLS proxy
        appends the proxy's address), stopping at the first that is not (those to its left are
        the client's own claims)."""
        peer = conn.client.host if conn.client else "-"
        if not (self._proxies and in_networks(peer, self._proxies)):
            return peer
        hops = [h.strip() for h in conn.headers.get("x-forwarded-for", "").split(",")[-8:]]
        for hop in reversed(hops):
            if not hop:
                break
            if not in_networks(hop, self._proxies):
                return hop[:64]
            peer = hop
        return peer[:64]

    def open_stream(self, keys: list[str]) -> float:
        """Count one more stream for each key, or 0 counted and a retry hint when one is full."""
        if any(self._streams.get(k, 0) >= self.opts.client_max_streams for k in keys):
            LIMITED.labels("streams").inc()
            return 5.0
        for k in keys:
            self._streams[k] = self._streams.get(k, 0) + 1
        return 0.0

    def close_stream(self, keys: list[str]) -> None:
        for k in keys:
            n = self._streams.get(k, 0) - 1
            if n > 0:
                self._streams[k] = n
            else:
                self._streams.pop(k, None)

    def take(self, which: str, keys: list[str], n: float = 1.0) -> float:
        wait = (self.prefetch if which == "prefetch" else self.beacons).take(keys, n)
        if wait > 0:
            LIMITED.labels(which).inc()
        return wait


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(entries: list[str]) -> tuple[Network, ...]:
    """CIDR ranges (a bare address is its own /32 or /128); raises ValueError on a bad one."""
    return tuple(ipaddress.ip_network(e.strip(), strict=False) for e in entries)


def in_networks(host: str, nets: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a Unix socket or test client name: never a proxy
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in n for n in nets)


def retry_after(wait_s: float) -> str:
    """Whole seconds, at least 1 (the header takes integers)."""
    return str(max(1, math.ceil(wait_s)))
