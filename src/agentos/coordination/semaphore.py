"""The cluster's provider semaphore in Redis: three Lua scripts, one round trip each.

Keys (under `coordination.key_prefix`):

- `permits:holders`, a ZSET: one member per open provider stream of any node
  (`<node id>/<stream id>`), scored by its lease expiry in Redis milliseconds;
- `permits:owner`, a HASH: member -> its tenant (to count a dead holder off its tenant);
- `permits:held`, a HASH: tenant -> how many slots it holds cluster-wide;
- `permits:seen`, a ZSET: tenant -> when it last asked (Redis ms), for "several tenants active";
- `permits:alive`, a marker every node's calls (its heartbeat at least) keep for three leases,
  and `permits:holdoff`: see "Redis lost its data" below.

Every script takes `now` from Redis `TIME`, never from a node's clock. `acquire` first drops
the holders whose lease has passed (a node killed with -9 stops refreshing; its slots come back
here), then grants when fewer than `limit` are held and the tenant is below its cap. `release`
removes one holder and publishes "released" on the bus channel when somebody may be waiting
(the pool was full, or the tenant was at its cap), inside the same script: no second round trip.
`refresh` is one node's heartbeat: it moves every one of its holders' expiry forward in one
call, and adds back any that Redis lost (a restarted Redis, a lease that ran out while the node
was cut off): the count then tells the truth about the streams that are really open.

All keys get a PEXPIRE of a few leases on every write, so a cluster that stops leaves nothing.

Redis lost its data (restarted without persistence, flushed, failed over to an empty replica).
Each node's open streams come back into `holders` only with its next heartbeat or reconnect;
until then an acquire would count from 0 and the provider could see more than the limit. So a
node that has talked to this cluster's semaphore before (`known`) and finds `alive` missing sets
`holdoff` for a little longer than one heartbeat period: acquires answer FULL (the waiters'
line retries) until every live node has added its streams back. A node that starts, not
knowing, only sets `alive`: the first node of a new cluster waits for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis.asyncio import Redis

GRANTED, FULL, CAPPED = 1, 0, -1
RELEASED_CHANNEL = "permits.released"

_COMMON = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holders, owner, held, seen, alive, holdoff = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local function count_off(member)
  local tenant = redis.call('HGET', owner, member)
  if tenant then
    if redis.call('HINCRBY', held, tenant, -1) <= 0 then redis.call('HDEL', held, tenant) end
    redis.call('HDEL', owner, member)
  end
end
local function keep(ms)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ms) end
end
-- Before a grant: drop the holders whose lease has passed (256 at most a call; a killed node's
-- slots come back here) and the tenants that have not asked for a lease.
local function reap(lease)
  local dead = redis.call('ZRANGEBYSCORE', holders, '-inf', now, 'LIMIT', 0, 256)
  for _, m in ipairs(dead) do
    count_off(m)
    redis.call('ZREM', holders, m)
  end
  redis.call('ZREMRANGEBYSCORE', seen, '-inf', now - lease)
end
-- Whether grants wait (Redis lost the semaphore; see the module's doc). `known`: this node used it before.
local function held_off(known, lease, hold)
  if redis.call('EXISTS', alive) == 0 and known == '1' then redis.call('SET', holdoff, '1', 'PX', hold) end
  redis.call('SET', alive, '1', 'PX', lease * 3)
  return redis.call('EXISTS', holdoff) == 1
end
"""

# ARGV: member, tenant, limit, cap, lease_ms, shared (1: the node knows several tenants), known, hold_ms.
# Returns {GRANTED | FULL | CAPPED, holders after}.
_ACQUIRE = (
    _COMMON
    + """
local member, tenant = ARGV[1], ARGV[2]
local limit, cap, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
reap(lease)
redis.call('ZADD', seen, now, tenant)
keep(lease * 3)
local waits = held_off(ARGV[7], lease, tonumber(ARGV[8]))
if redis.call('ZSCORE', holders, member) then
  redis.call('ZADD', holders, now + lease, member)
  return {1, redis.call('ZCARD', holders)}
end
local n = redis.call('ZCARD', holders)
if n >= limit or waits then return {0, n} end
local mine = tonumber(redis.call('HGET', held, tenant)) or 0
if mine >= cap and (ARGV[6] == '1' or redis.call('ZCARD', seen) > 1) then return {-1, n} end
redis.call('ZADD', holders, now + lease, member)
redis.call('HSET', owner, member, tenant)
redis.call('HINCRBY', held, tenant, 1)
return {1, n + 1}
"""
)

# The same for many members in one call, in order. ARGV: limit, cap, lease_ms, known, hold_ms,
# then member, tenant, shared triples. Returns one status per member.
_ACQUIRE_MANY = (
    _COMMON
    + """
local limit, cap, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
reap(lease)
keep(lease * 3)
local waits = held_off(ARGV[4], lease, tonumber(ARGV[5]))
local n = redis.call('ZCARD', holders)
local out = {}
for i = 6, #ARGV, 3 do
  local member, tenant = ARGV[i], ARGV[i + 1]
  redis.call('ZADD', seen, now, tenant)
  local status = 1
  if redis.call('ZSCORE', holders, member) then
    redis.call('ZADD', holders, now + lease, member)
  elseif n >= limit or waits then
    status = 0
  else
    local mine = tonumber(redis.call('HGET', held, tenant)) or 0
    if mine >= cap and (ARGV[i + 2] == '1' or redis.call('ZCARD', seen) > 1) then
      status = -1
    else
      redis.call('ZADD', holders, now + lease, member)
      redis.call('HSET', owner, member, tenant)
      redis.call('HINCRBY', held, tenant, 1)
      n = n + 1
    end
  end
  out[#out + 1] = status
end
return out
"""
)
# ARGV: member, limit, cap, channel. Returns 1 if the member held a slot.
_RELEASE = (
    _COMMON
    + """
local member = ARGV[1]
local n = redis.call('ZCARD', holders)
local tenant = redis.call('HGET', owner, member)
local mine = tenant and (tonumber(redis.call('HGET', held, tenant)) or 0) or 0
if redis.call('ZREM', holders, member) == 0 then return 0 end
count_off(member)
if n >= tonumber(ARGV[2]) or mine >= tonumber(ARGV[3]) then
  redis.call('PUBLISH', ARGV[4], '')
end
return 1
"""
)

# The same for many members: ARGV: limit, cap, channel, then the members. One "released" at most.
_RELEASE_MANY = (
    _COMMON
    + """
local n = redis.call('ZCARD', holders)
local wake = n >= tonumber(ARGV[1])
local freed = 0
for i = 4, #ARGV do
  local tenant = redis.call('HGET', owner, ARGV[i])
  if tenant and (tonumber(redis.call('HGET', held, tenant)) or 0) >= tonumber(ARGV[2]) then wake = true end
  if redis.call('ZREM', holders, ARGV[i]) == 1 then
    count_off(ARGV[i])
    freed = freed + 1
  end
end
if wake and freed > 0 then redis.call('PUBLISH', ARGV[3], '') end
return freed
"""
)
# ARGV: lease_ms, known, hold_ms, then member, tenant pairs. Returns how many members were added back.
_REFRESH = (
    _COMMON
    + """
local lease = tonumber(ARGV[1])
held_off(ARGV[2], lease, tonumber(ARGV[3]))
local added = 0
for i = 4, #ARGV, 2 do
  if redis.call('ZADD', holders, now + lease, ARGV[i]) == 1 then
    added = added + 1
    redis.call('HSET', owner, ARGV[i], ARGV[i + 1])
    redis.call('HINCRBY', held, ARGV[i + 1], 1)
  end
end
if #ARGV > 3 then keep(lease * 3) end
return added
"""
)


class RedisSemaphore:
    """The scripts, registered once on a client (EVALSHA; reloaded on NOSCRIPT by redis-py)."""

    def __init__(self, redis: Redis, prefix: str, limit: int, cap: int, lease_s: float, hold_s: float = 0.0) -> None:
        """`hold_s`: how long grants wait once a node that knew the semaphore finds Redis lost it
        (a little more than the longest time between two heartbeats of a node)."""
        names = ("holders", "owner", "held", "seen", "alive", "holdoff")
        self._keys = [f"{prefix}permits:{name}" for name in names]
        self._channel = prefix + RELEASED_CHANNEL  # as `Bus` names it: subscribers hear it
        self.limit = limit
        self.cap = cap
        self.lease_ms = max(1, round(lease_s * 1000))
        self.hold_ms = max(1, round(hold_s * 1000))
        self.known = False  # set by the caller once a call went through: from then on a lost `alive` holds grants
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._acquire_many = redis.register_script(_ACQUIRE_MANY)
        self._release_many = redis.register_script(_RELEASE_MANY)
        self._refresh = redis.register_script(_REFRESH)

    async def acquire(self, member: str, tenant: str, *, shared: bool = False) -> tuple[int, int]:
        """(GRANTED, FULL or CAPPED; the number of holders after)."""
        args: list[Any] = [member, tenant, self.limit, self.cap, self.lease_ms, int(shared), *self._lost_args()]
        status, holders = await self._acquire(keys=self._keys, args=args)
        return int(status), int(holders)

    async def acquire_many(self, items: list[tuple[str, str, bool]]) -> list[int]:
        """`acquire` for many `(member, tenant, shared)` in one call, in order: their statuses."""
        args: list[Any] = [self.limit, self.cap, self.lease_ms, *self._lost_args()]
        for member, tenant, shared in items:
            args += [member, tenant, int(shared)]
        return [int(status) for status in await self._acquire_many(keys=self._keys, args=args)]

    async def release_many(self, members: list[str]) -> int:
        """`release` for many members in one call; how many held a slot."""
        args: list[Any] = [self.limit, self.cap, self._channel, *members]
        return int(await self._release_many(keys=self._keys, args=args))

    async def release(self, member: str) -> bool:
        """Give `member`'s slot back; False if it held none (expired, or never granted)."""
        args: list[Any] = [member, self.limit, self.cap, self._channel]
        return bool(await self._release(keys=self._keys, args=args))

    async def refresh(self, members: Iterable[tuple[str, str]]) -> int:
        """Extend the lease of every `(member, tenant)`; returns how many Redis had lost."""
        args: list[Any] = [self.lease_ms, *self._lost_args()]
        for member, tenant in members:
            args += [member, tenant]
        return int(await self._refresh(keys=self._keys, args=args))

    def _lost_args(self) -> list[Any]:
        return [int(self.known), self.hold_ms]

    async def holders(self, redis: Redis) -> int:
        """How many slots are held (expired ones included until the next acquire): for tests."""
        return int(await redis.zcard(self._keys[0]))
