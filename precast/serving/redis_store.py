"""The shared serving store on Redis or Redis Cluster: newest-wins by a Lua compare-and-set, so
any number of writers (API replicas, SRE rebuilds) can race without an older prediction ever
replacing a newer one. Key layout: `<key_prefix>p:{<device_id>}` (one string, see `entry.py` for
the value; the braces are a Redis Cluster hash tag, so every key of one device shares a slot);
`<key_prefix>meta:loaded` says a full load from the topic finished (its absence after a Redis
restart tells the materializers to replay).

On a cluster no script touches two devices: the multi-key calls of a single Redis become one
call per key, pipelined per node (`cluster_calls.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

import redis
import redis.asyncio
from redis.commands.core import Script

from precast.serving.cluster_calls import (
    AnyRedis,
    async_cluster_errors_as_redis_errors,
    cluster_errors_as_redis_errors,
    per_key_script,
)
from precast.serving.entry import Entry, decode, encode, valid_device_id
from precast.serving.result import FUTURE
from precast.settings import RedisSettings
from schemas.events import MAX_AHEAD_MS

# redis-py types replies as `bytes | str`; our clients never set decode_responses, so they are
# always bytes. A typed alias of `decode` says so without a per-value check on the read path.
_decode = cast(Callable[[bytes | str], Entry], decode)

# Byte-wise string comparison: Lua's `<` uses strcoll, which depends on the server's locale;
# Python compares code points, which for UTF-8 equals byte order.
_LUA_NEWER = r"""
local function bytes_gt(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
-- order_key: data time, then a live answer before a backfill (flag B), production time, version
local function newer(new, cur)
  local nc, np, nf, nv = string.match(new, '^(%d+) (%d+) %d+ %d+ %S+ (%S+) ([^\n]*)\n')
  local cc, cp, cf, cv = string.match(cur, '^(%d+) (%d+) %d+ %d+ %S+ (%S+) ([^\n]*)\n')
  if cc == nil then return true end
  if nc ~= cc then return tonumber(nc) > tonumber(cc) end
  local nlive, clive = string.find(nf, 'B', 1, true) == nil, string.find(cf, 'B', 1, true) == nil
  if nlive ~= clive then return nlive end
  if np ~= cp then return tonumber(np) > tonumber(cp) end
  return bytes_gt(nv, cv)
end
"""

# KEYS: entry keys; ARGV[1]: now ms, ARGV[2]: grace ms, ARGV[2+i]: encoded entry for KEYS[i].
# Returns per key 1 stored, 0 older or duplicate, -1 already expired (see result.py).
_PUT = (
    _LUA_NEWER
    + r"""
local now, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local new = ARGV[i + 2]
  local ttl = tonumber(string.sub(new, 29, 41)) + grace - now
  if ttl <= 0 then
    out[i] = -1
  else
    local cur = redis.call('GET', key)
    if cur and not newer(new, cur) then
      out[i] = 0
    else
      redis.call('SET', key, new, 'PX', ttl)
      out[i] = 1
    end
  end
end
return out
"""
)

# KEYS: entry keys; ARGV[i]: the value seen. Deletes only what is unchanged.
_DELETE_IF_SAME = r"""
local n = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


class RedisStore:
    """Same API as `MemoryStore`. Redis errors propagate as `redis.RedisError`."""

    def __init__(self, client: AnyRedis, key_prefix: str, grace_ms: int = 0) -> None:
        self.client, self.grace_ms = client, grace_ms
        self.cluster = isinstance(client, redis.RedisCluster)
        self._p = key_prefix + "p:{"
        self._loaded = key_prefix + "meta:loaded"
        self._put = client.register_script(_PUT)
        self._delete_if_same = client.register_script(_DELETE_IF_SAME)

    @classmethod
    def from_settings(cls, settings: RedisSettings, grace_ms: int = 0) -> RedisStore:
        from precast.redis_client import connect

        return cls(connect(settings), settings.key_prefix, grace_ms)

    def key(self, device_id: str) -> str:
        # The one place a key is built: only pattern-checked IDs get in (no injection).
        if not valid_device_id(device_id):
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
        return None if raw is None else _decode(raw)

    @cluster_errors_as_redis_errors
    def get_many(self, device_ids: Sequence[str], now_ms: int | None = None) -> list[Entry | None]:
        if not device_ids:
            return []
        raws = self._mget([self.key(d) for d in device_ids])
        return [None if r is None else _decode(r) for r in raws]

    def iterate(self, batch: int = 1000) -> Iterator[tuple[str, Entry]]:
        for keys in self._scan(batch):
            for k, raw in zip(keys, self._mget(keys), strict=True):
                if raw is not None:
                    yield self._device(k), _decode(raw)

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
            hit = [
                (k, r)
                for k, r in zip(keys, raws, strict=True)
                if r is not None and predicate(self._device(k), _decode(r))
            ]
            if hit:
                done = self._script(
                    self._delete_if_same, [k for k, _ in hit], [r for _, r in hit], []
                )
                n += sum(done) if isinstance(done, list) else done
        return n

    @cluster_errors_as_redis_errors
    def clear(self) -> int:
        """Delete every stored entry and the load marker (a clean rebuild); returns how many."""
        n = sum(self.client.delete(*keys) for keys in self._scan(1000))
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

    @async_cluster_errors_as_redis_errors
    async def get(self, device_id: str) -> Entry | None:
        if not valid_device_id(device_id):
            raise ValueError(f"invalid device ID {device_id[:64]!r}")
        raw = await self.client.get(self._p + device_id + "}")
        return None if raw is None else _decode(raw)

    @async_cluster_errors_as_redis_errors
    async def get_many(self, device_ids: Sequence[str]) -> list[Entry | None]:
        if not device_ids:
            return []
        for d in device_ids:
            if not valid_device_id(d):
                raise ValueError(f"invalid device ID {d[:64]!r}")
        keys = [self._p + d + "}" for d in device_ids]
        if isinstance(self.client, redis.asyncio.RedisCluster):
            raws = await self.client.mget_nonatomic(keys)
        else:
            raws = await self.client.mget(keys)
        return [None if r is None else _decode(r) for r in raws]

    async def close(self) -> None:
        await self.client.aclose()
