"""The Redis store's Lua scripts and its encoding of a validity lease (`redis_store.py`): every
compare-and-set runs in Redis, so writers racing each other never let an older value win."""

from __future__ import annotations

import re

from precast.serving.leases import Lease

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
PUT = (
    _LUA_NEWER
    + r"""
local now, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local new = ARGV[i + 2]
  local keep = tonumber(string.sub(new, 29, 41))
  local flag = string.match(new, '^%d+ %d+ %d+ %d+ %S+ (%S+) ')
  if flag and string.find(flag, 'L', 1, true) then  -- kept while a lease may extend it
    local u = tonumber(string.match(flag, ':(%d+)$'))
    if u and u > keep then keep = u end
  end
  local ttl = keep + grace - now
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

# KEYS: lease keys; ARGV[1]: now ms, ARGV[2]: grace ms, ARGV[2+i]: encoded lease for KEYS[i]
# ("<generation> <certified_at> <produced_at> <valid_until> <received_at> <offset>").
PUT_LEASE = r"""
local now, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local new = ARGV[i + 2]
  local ng, nc, np, nv = string.match(new, '^(%d+) (%d+) (%d+) (%d+) ')
  local ttl = tonumber(nv) + grace - now
  if ttl <= 0 then
    out[i] = -1
  else
    local cur = redis.call('GET', key)
    local newer = true
    if cur then
      local cg, cc, cp = string.match(cur, '^(%d+) (%d+) (%d+) ')
      if cg then
        if ng ~= cg then newer = tonumber(ng) > tonumber(cg)
        elseif nc ~= cc then newer = tonumber(nc) > tonumber(cc)
        else newer = tonumber(np) > tonumber(cp) end
      end
    end
    if newer then
      redis.call('SET', key, new, 'PX', ttl)
      out[i] = 1
    else
      out[i] = 0
    end
  end
end
return out
"""

# KEYS: entry keys; ARGV[i]: the value seen. Deletes only what is unchanged.
DELETE_IF_SAME = r"""
local n = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
"""


def encode_lease(x: Lease) -> bytes:
    return b"%d %d %d %d %d %d" % (
        x.generation,
        x.certified_at_ms,
        x.produced_at_ms,
        x.valid_until_ms,
        x.received_at_ms,
        x.offset,
    )


# What encode_lease writes (an offset may be negative: -1 is unknown); nothing else is read.
_LEASE = re.compile(rb"(\d{1,13}) (\d{1,13}) (\d{1,13}) (\d{1,13}) (\d{1,13}) (-?\d{1,19})")


def decode_lease(partition: int, raw: bytes) -> Lease:
    """`ValueError` for a value encode_lease would not have written."""
    m = _LEASE.fullmatch(raw)
    if m is None:
        raise ValueError("not a stored validity lease")
    g, c, p, v, r, o = (int(x) for x in m.groups())
    return Lease(partition, g, c, v, p, r, o)
