"""The shared serving store on Redis or Redis Cluster: newest-wins by a Lua compare-and-set, so
any number of writers (API replicas, SRE rebuilds) can race without an older prediction ever
replacing a newer one. Key layout: `<key_prefix>p:{<device_id>}` (one string, see `entry.py` for
the value; the braces are a Redis Cluster hash tag, so every key of one device shares a slot);
`<key_prefix>meta:loaded` says a full load from the topic finished (its absence after a Redis
restart tells the materializers to replay); `<key_prefix>lease:{<partition>}` holds the
partition's newest validity lease (precast.serving.leases; newest-wins by a Lua compare too).
Readers apply a lease only while the load marker is there: during a replay an old answer may be
back before the records that superseded it, and a lease must never extend it meanwhile.

On a cluster no script touches two devices: the multi-key calls of a single Redis become one
call per key, pipelined per node (`cluster_calls.py`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

import redis
import redis.asyncio
from redis.commands.core import Script

from precast.guard import Guard
from precast.serving.cluster_calls import (
    AnyRedis,
    async_cluster_errors_as_redis_errors,
    cluster_errors_as_redis_errors,
    per_key_script,
)
from precast.serving.entry import Entry, decode, encode
from precast.serving.leases import Lease, LeaseBook, extend, extension_until
from precast.serving.redis_scripts import (
    DELETE_IF_SAME,
    PUT,
    PUT_LEASE,
    decode_lease,
    encode_lease,
)
from precast.serving.result import FUTURE
from precast.settings import RedisSettings
from schemas.events import MAX_AHEAD_MS, is_device_id

# Values read back are re-checked (entry.decode): one that anything else wrote to Redis is a
# miss, counted (`precast_records_rejected_total{reader="redis-entries"}`) and logged (bounded),
# never served and never an error. redis-py types replies as `bytes | str`; our clients never
# set decode_responses, so they are always bytes.
_GUARD = Guard("redis-entries", logging.getLogger("precast.serving.redis"))


def _decode(raw: bytes | str) -> Entry | None:
    try:
        return decode(cast(bytes, raw))
    except Exception as exc:  # noqa: BLE001 - whatever a stored value holds is a miss
        _GUARD.reject(exc)
        return None


def _decode_lease(partition: int, raw: bytes | str) -> Lease | None:
    try:
        lease = decode_lease(partition, cast(bytes, raw))
    except Exception as exc:  # noqa: BLE001 - a lease that cannot be read extends nothing
        _GUARD.reject(exc)
        return None
    return lease


def _now_ms() -> int:
    return int(time.time() * 1000)


class RedisStore:
    """Same API as `MemoryStore`. Redis errors propagate as `redis.RedisError`."""

    def __init__(self, client: AnyRedis, key_prefix: str, grace_ms: int = 0) -> None:
        self.client, self.grace_ms = client, grace_ms
        self.cluster = isinstance(client, redis.RedisCluster)
        self._p = key_prefix + "p:{"
        self._loaded = key_prefix + "meta:loaded"
        self._lease = key_prefix + "lease:{"
        self._put = client.register_script(PUT)
        self._put_lease = client.register_script(PUT_LEASE)
        self._delete_if_same = client.register_script(DELETE_IF_SAME)

    @classmethod
    def from_settings(cls, settings: RedisSettings, grace_ms: int = 0) -> RedisStore:
        from precast.redis_client import connect

        return cls(connect(settings), settings.key_prefix, grace_ms)

    def key(self, device_id: str) -> str:
        # The one place a key is built: only pattern-checked IDs get in (no injection).
        if not is_device_id(device_id):
            raise ValueError(f"invalid device ID {device_id[:64]!r}")
        return self._p + device_id + "}"

    def _device(self, key: bytes) -> str:
        return key.decode()[len(self._p) : -1]

    def _mget(self, keys: Sequence[str] | Sequence[bytes]) -> list[bytes | None]:
        if isinstance(self.client, redis.RedisCluster):  # one MGET per slot, pipelined per node
            return cast(list[bytes | None], self.client.mget_nonatomic(keys))
        return cast(list[bytes | None], self.client.mget(keys))

    def _script(
        self,
        script: Script,
        keys: Sequence[str | bytes],
        args: Sequence[str | bytes | int],
        shared: Sequence[str | bytes | int],
    ) -> list[int] | int:
        """Run `script` over `keys` (`args[i]` belongs to `keys[i]`, `shared` go first)."""
        if isinstance(self.client, redis.RedisCluster):
            return per_key_script(self.client, script, keys, args, shared)
        every: list[str | bytes | int] = [*shared, *args]
        return cast(list[int] | int, script(keys=list(keys), args=every))

    # -- reads --------------------------------------------------------------------------------------
    @cluster_errors_as_redis_errors
    def get(self, device_id: str, now_ms: int | None = None) -> Entry | None:
        raw = self.client.get(self.key(device_id))
        return None if raw is None else _decode(cast(bytes, raw))

    @cluster_errors_as_redis_errors
    def get_many(self, device_ids: Sequence[str], now_ms: int | None = None) -> list[Entry | None]:
        if not device_ids:
            return []
        raws = self._mget([self.key(d) for d in device_ids])
        return [None if r is None else _decode(r) for r in raws]

    def iterate(self, batch: int = 1000) -> Iterator[tuple[str, Entry]]:
        for keys in self._scan(batch):
            for k, raw in zip(keys, self._mget(keys), strict=True):
                e = None if raw is None else _decode(raw)
                if e is not None:
                    yield self._device(k), e

    def _scan(self, batch: int) -> Iterator[list[bytes]]:
        if self.cluster:  # every master in turn
            found: list[bytes] = []
            for k in self.client.scan_iter(match=self._p + "*", count=batch):
                found.append(cast(bytes, k))
                if len(found) >= batch:
                    yield found
                    found = []
            if found:
                yield found
            return
        cursor = 0
        while True:
            cursor, keys = self.client.scan(cursor, match=self._p + "*", count=batch)
            if keys:
                yield cast(list[bytes], keys)
            if cursor == 0:
                return

    @cluster_errors_as_redis_errors
    def count(self) -> int:
        return sum(len(k) for k in self._scan(5000))

    # -- writes ---------------------------------------------------------------------------------------
    def put_if_newer(self, device_id: str, entry: Entry, now_ms: int | None = None) -> int:
        return self.put_many_if_newer(((device_id, entry),), now_ms)[0]

    @cluster_errors_as_redis_errors
    def put_many_if_newer(
        self,
        items: Iterable[tuple[str, Entry]],
        now_ms: int | None = None,
        chunk: int = 500,
        *,
        ids_checked: bool = False,
    ) -> list[int]:
        """Atomic per key; one script call per `chunk` entries (one round trip each).
        `ids_checked=True`: the IDs come from `prediction_item`, which matched the pattern."""
        items = list(items)
        now_i = now_ms or _now_ms()
        now = str(now_i)
        future = [e.computed_at_ms > now_i + MAX_AHEAD_MS for _, e in items]
        if any(future):  # never sent to Redis; FUTURE in their places
            kept = self.put_many_if_newer(
                [it for it, f in zip(items, future, strict=True) if not f],
                now_i,
                chunk,
                ids_checked=ids_checked,
            )
            it = iter(kept)
            return [FUTURE if f else next(it) for f in future]
        out: list[int] = []
        key, p = self.key, self._p
        for i in range(0, len(items), chunk):
            part = items[i : i + chunk]
            keys = [p + d + "}" for d, _ in part] if ids_checked else [key(d) for d, _ in part]
            done = self._script(self._put, keys, [encode(e) for _, e in part], [now, self.grace_ms])
            out.extend(done if isinstance(done, list) else [done])
        return out

    @cluster_errors_as_redis_errors
    def put_leases(self, leases: list[Lease], now_ms: int | None = None) -> list[int]:
        """Validity leases, newest per partition (STORED / OLDER / EXPIRED each). A writer puts
        a partition's lease only after every entry before it in the topic."""
        if not leases:
            return []
        keys = [f"{self._lease}{x.partition}}}" for x in leases]
        now = str(now_ms or _now_ms())
        done = self._script(
            self._put_lease, keys, [encode_lease(x) for x in leases], [now, self.grace_ms]
        )
        return done if isinstance(done, list) else [done]

    @cluster_errors_as_redis_errors
    def lease(self, partition: int) -> Lease | None:
        raw = self.client.get(f"{self._lease}{partition}}}")
        return None if raw is None else _decode_lease(partition, cast(bytes, raw))

    @cluster_errors_as_redis_errors
    def lease_book(self) -> LeaseBook:
        """Every partition's lease as a `LeaseBook` (for the tools: `book.resolve(device, e)`
        is an entry as reads serve it); empty while the store is not loaded (see above)."""
        book = LeaseBook(self.grace_ms)
        if not self.loaded():
            return book
        found = []
        for k in self.client.scan_iter(match=self._lease + "*", count=1000):
            raw = self.client.get(k)
            part = cast(bytes, k).decode()[len(self._lease) : -1]
            lease = None if raw is None or not part.isdigit() else _decode_lease(int(part), raw)
            if lease is not None:
                found.append(lease)
        book.put_many(found, _now_ms())
        return book

    @cluster_errors_as_redis_errors
    def delete(self, device_ids: Iterable[str]) -> int:
        keys = [self.key(d) for d in device_ids]
        return self.client.delete(*keys) if keys else 0  # a cluster client splits by slot

    @cluster_errors_as_redis_errors
    def purge(self, predicate: Callable[[str, Entry], bool], batch: int = 1000) -> int:
        """Delete every entry for which `predicate(device_id, entry)` is true; an entry that a
        newer prediction replaced meanwhile is kept. Returns how many were deleted."""
        n = 0
        for keys in self._scan(batch):
            raws = self._mget(keys)
            hit: list[tuple[bytes, bytes]] = []
            for k, r in zip(keys, raws, strict=True):
                e = None if r is None else _decode(r)
                if r is not None and e is not None and predicate(self._device(k), e):
                    hit.append((k, r))
            if hit:
                done = self._script(
                    self._delete_if_same, [k for k, _ in hit], [r for _, r in hit], []
                )
                n += sum(done) if isinstance(done, list) else done
        return n

    @cluster_errors_as_redis_errors
    def clear(self) -> int:
        """Delete every stored entry, the leases and the load marker (a clean rebuild); returns
        how many entries."""
        n = sum(self.client.delete(*keys) for keys in self._scan(1000))
        for k in list(self.client.scan_iter(match=self._lease + "*", count=1000)):
            self.client.delete(k)
        self.client.delete(self._loaded)
        return n

    # -- load marker ----------------------------------------------------------------------------------
    @cluster_errors_as_redis_errors
    def loaded(self) -> bool:
        return bool(self.client.exists(self._loaded))

    @cluster_errors_as_redis_errors
    def mark_loaded(self) -> None:
        self.client.set(self._loaded, str(_now_ms()))


class AsyncRedisReader:
    """The read path's view of a `RedisStore` (asyncio), for replicas that keep no local view."""

    def __init__(self, settings: RedisSettings) -> None:
        from precast.redis_client import connect_async

        self.client = connect_async(settings)
        self.cluster = isinstance(self.client, redis.asyncio.RedisCluster)
        self._p = settings.key_prefix + "p:{"
        self._lease = settings.key_prefix + "lease:{"
        self._loaded = settings.key_prefix + "meta:loaded"
        # partition -> (monotonic s, lease or None): a lease read is reused for `lease_cache_s`
        # (an older lease is always safe to apply: it never extends a newer answer)
        self._leases: dict[int, tuple[float, Lease | None]] = {}
        self.lease_cache_s = 0.1

    async def _resolve(self, device_id: str, e: Entry) -> Entry:
        t = e.terms
        if t is None:
            return e
        mono = time.monotonic()
        cached = self._leases.get(t.partition)
        if cached is not None and mono - cached[0] < self.lease_cache_s:
            lease = cached[1]
        else:
            key = f"{self._lease}{t.partition}}}"
            if isinstance(self.client, redis.asyncio.RedisCluster):
                raw, loaded = await self.client.mget_nonatomic([key, self._loaded])
            else:
                raw, loaded = await self.client.mget([key, self._loaded])
            # during a replay (no load marker) no lease applies: see the module docstring
            lease = None if raw is None or loaded is None else _decode_lease(t.partition, raw)
            self._leases[t.partition] = (mono, lease)
        until = extension_until(e, lease)
        return e if lease is None or until <= e.valid_until_ms else extend(e, lease, until)

    @async_cluster_errors_as_redis_errors
    async def get(self, device_id: str) -> Entry | None:
        if not is_device_id(device_id):
            raise ValueError(f"invalid device ID {device_id[:64]!r}")
        raw = await self.client.get(self._p + device_id + "}")
        e = None if raw is None else _decode(raw)
        return None if e is None else await self._resolve(device_id, e)

    @async_cluster_errors_as_redis_errors
    async def get_many(self, device_ids: Sequence[str]) -> list[Entry | None]:
        if not device_ids:
            return []
        for d in device_ids:
            if not is_device_id(d):
                raise ValueError(f"invalid device ID {d[:64]!r}")
        keys = [self._p + d + "}" for d in device_ids]
        if isinstance(self.client, redis.asyncio.RedisCluster):
            raws = await self.client.mget_nonatomic(keys)
        else:
            raws = await self.client.mget(keys)
        out: list[Entry | None] = []
        for d, r in zip(device_ids, raws, strict=True):
            e = None if r is None else _decode(r)
            out.append(None if e is None else await self._resolve(d, e))
        return out

    async def close(self) -> None:
        await self.client.aclose()
