"""Tenant caps counted for the whole cluster: `max_concurrent_turns` and `max_active_runs`
held in Redis, so that two nodes do not each admit the full cap (issue #9: a limit kept
per node multiplies by the number of nodes).

Keys (under `coordination.key_prefix`): `holds:<kind>:<tenant>`, a ZSET with one member per
holder of any node (`<node id>/<turn id>`), scored by its lease expiry in Redis milliseconds
(Redis `TIME`, never a node's clock). `acquire` drops the expired members (a node killed with
-9 stops renewing: its holders come back within one lease), counts, and adds the member when
under the cap: one Lua call. `release` is one ZREM. Both go through `Batches`: turns starting
or ending together share one round trip. The node's existing heartbeat (`ClusterPermits`)
renews every lease it holds (`refresh`) and puts back any Redis lost.

`add` counts a holder without asking, in the background: a run the kernel never refuses
(resumed, answered, taken over, a child of a working parent) still counts against new ones.

Redis down (`Link.call` answers None): each node admits up to `ceil(cap / expected_nodes)`
of the tenant's holders it has itself, like the provider permits. A tenant without the cap
costs nothing: the caller asks only when the cap is set.

Redis lost its data (restarted without persistence, flushed): the holders of turns and runs
still running are gone from it until each node's next heartbeat (or its bus's reconnect) puts
them back, and an acquire meanwhile would count from 0. So, as the provider permits do
(`coordination.semaphore`), every call keeps a marker `holds-alive:<kind>` for three leases
(the heartbeat calls even with nothing held), and a node that has talked to Redis before
(`known`) and finds the marker gone sets `holds-holdoff:<kind>` for a little longer than a
heartbeat period (`permits.hold_off_s`): meanwhile a new holder is refused (the caller answers
429 as at the cap) and `add` still counts. A node that starts, not knowing, only sets the marker.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from agentos.coordination.batches import Batches
from agentos.coordination.link import Link
from agentos.coordination.permits import hold_off_s

log = logging.getLogger("agentos.coordination")

# KEYS[1], KEYS[2]: the marker and the hold-off; ARGV[1..3]: lease_ms, known (1: this node talked
# to Redis before), hold_ms. Sets `now`, `lease` and `waits` (new holders wait: Redis lost them).
_COMMON = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 and ARGV[2] == '1' then
  redis.call('SET', KEYS[2], '1', 'PX', tonumber(ARGV[3]))
end
redis.call('SET', KEYS[1], '1', 'PX', lease * 3)
local waits = redis.call('EXISTS', KEYS[2]) == 1
"""

# KEYS[3..]: one ZSET per item; ARGV[4..]: member, cap per item. Returns 1 (held) or 0 per item.
_ACQUIRE_MANY = (
    _COMMON
    + """
local out = {}
for i = 3, #KEYS do
  local key, member, cap = KEYS[i], ARGV[2 * i - 2], tonumber(ARGV[2 * i - 1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local ok = 1
  if not redis.call('ZSCORE', key, member) then
    if redis.call('ZCARD', key) >= cap or (waits and cap < 2147483648) then ok = 0 end  -- 2^31: `add`
  end
  if ok == 1 then
    redis.call('ZADD', key, now + lease, member)
    redis.call('PEXPIRE', key, lease * 3)
  end
  out[#out + 1] = ok
end
return out
"""
)

# KEYS: one ZSET per item; ARGV: member per item. Returns how many were held.
_RELEASE_MANY = """
local freed = 0
for i = 1, #KEYS do freed = freed + redis.call('ZREM', KEYS[i], ARGV[i]) end
return freed
"""

# KEYS[3..]: one ZSET per member; ARGV[4..]: the members. Renews (or puts back) each one;
# returns how many Redis had lost.
_REFRESH = (
    _COMMON
    + """
local added = 0
for i = 3, #KEYS do
  added = added + redis.call('ZADD', KEYS[i], now + lease, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], lease * 3)
end
return added
"""
)

Item = tuple[str, str, int]  # key, member, cap
UNCAPPED = 2**31  # `add`'s cap: counted, never refused, in a hold-off too (the scripts' literal)


class ClusterHolds:
    """One kind of tenant cap (`kind`: "turns", "runs") counted in Redis for every node together."""

    def __init__(self, link: Link, node: str, kind: str, *, lease_s: float, hold_s: float | None = None) -> None:
        """`hold_s`: how long new holders are refused once a node that knew Redis finds it lost
        them (default: the provider permits' heartbeat gap for `lease_s`, which renews these)."""
        self._link = link
        self._node = node
        self._kind = kind
        self._lease_ms = max(1, round(lease_s * 1000))
        self._hold_ms = max(1, round((hold_off_s(lease_s) if hold_s is None else hold_s) * 1000))
        self._marks = [f"{link.prefix}holds-alive:{kind}", f"{link.prefix}holds-holdoff:{kind}"]
        self.known = False  # a call went through: from then on a lost marker means Redis lost the holders
        self.held: dict[str, str] = {}  # holder id -> tenant: this node's holders
        self.restored_total = 0  # holders Redis had lost that this node put back
        self._acquire = link.redis.register_script(_ACQUIRE_MANY)
        self._release = link.redis.register_script(_RELEASE_MANY)
        self._refresh = link.redis.register_script(_REFRESH)
        self._acquires: Batches[Item, int] = Batches(self._acquire_batch)
        self._releases: Batches[tuple[str, str], int] = Batches(self._release_batch)

    async def acquire(self, holder: str, tenant: str, cap: int) -> bool:
        """Whether `holder` may start: fewer than `cap` of the tenant's holders in the cluster
        (Redis down: fewer than this node's share of `cap` on this node; Redis just lost its
        data: no, until the nodes have put their holders back)."""
        status = await self._acquires.submit((self._key(tenant), self._member(holder), cap))
        if status is None:
            share = math.ceil(cap / self._link.expected_nodes)
            status = int(sum(1 for t in self.held.values() if t == tenant) < share)
        # Recorded here, after the call: a caller cancelled during it leaves a member this node
        # never renews, gone with its lease (recording it in the batch would keep it for good).
        if status:
            self.held[holder] = tenant
        return bool(status)

    def add(self, holder: str, tenant: str) -> None:
        """Count `holder` without asking (a run the kernel never refuses: resumed, answered, a
        child of a working parent), in the background: the count stays the truth."""
        if holder not in self.held:
            self.held[holder] = tenant
            self._acquires.submit((self._key(tenant), self._member(holder), UNCAPPED))

    def release(self, holder: str) -> None:
        """Give `holder`'s place back (a no-op for one without). Redis is told in the background
        (`Batches` runs the call in its own task); a release Redis misses ends with its lease."""
        tenant = self.held.pop(holder, None)
        if tenant is not None:
            self._releases.submit((self._key(tenant), self._member(holder)))

    async def refresh(self, recovery: bool = False) -> None:
        """Renew the lease of every holder of this node, putting back any Redis lost (the
        heartbeat; `recovery`: Redis just came back, before other calls)."""
        # Even with nothing held: it keeps the marker that tells a Redis that lost its data.
        items = [(self._key(tenant), self._member(holder)) for holder, tenant in self.held.items()]
        keys = [*self._marks, *(key for key, _ in items)]
        args: list[Any] = [*self._common_args(), *(member for _, member in items)]
        added = await self._link.call(lambda: self._refresh(keys=keys, args=args), recovery=recovery)
        if added is not None:
            self.known = True
        if added:
            self.restored_total += int(added)
            log.warning(
                "coordination: %d %s holders of this node were missing in Redis; counted again", added, self._kind
            )

    async def close(self) -> None:
        """Give back every holder of this node (best effort: the leases end the rest)."""
        for holder in list(self.held):
            self.release(holder)
        await self._releases.wait_idle()

    async def count(self, tenant: str) -> int:
        """The tenant's holders in Redis, expired ones included until the next acquire: for tests."""
        return int(await self._link.redis.zcard(self._key(tenant)))

    async def _acquire_batch(self, items: list[Item]) -> list[int] | None:
        args: list[Any] = self._common_args()
        for _, member, cap in items:
            args += [member, cap]
        keys = [*self._marks, *(key for key, _, _ in items)]
        answer = await self._link.call(lambda: self._acquire(keys=keys, args=args))
        if answer is None:
            return None
        self.known = True
        return [int(ok) for ok in answer]

    def _common_args(self) -> list[Any]:
        return [self._lease_ms, int(self.known), self._hold_ms]

    async def _release_batch(self, items: list[tuple[str, str]]) -> list[int] | None:
        keys, members = [key for key, _ in items], [member for _, member in items]
        freed = await self._link.call(lambda: self._release(keys=keys, args=members))
        return None if freed is None else [1] * len(items)

    def _key(self, tenant: str) -> str:
        return f"{self._link.prefix}holds:{self._kind}:{tenant}"

    def _member(self, holder: str) -> str:
        return f"{self._node}/{holder}"
