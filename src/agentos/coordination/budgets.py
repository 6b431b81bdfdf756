"""The budgets' counters in Redis, for every node together: `tenancy.budgets.Budgets` whose
holds and spends are Lua scripts, so that N nodes under a burst never spend past a budget.

Each counter (`tenant:acme:day:20430`, `key:k1:month:2026-12`, `run:r1`) is two keys:
`<prefix>budget:<counter>`, a hash of `spent` and `held` (millionths) and one field `h:<hold_id>`
per hold; and `<prefix>budget:<counter>:lapse`, the holds by when they lapse (epoch ms). One
script checks every line of a call and holds on all of them, or on none, in one step: Redis runs
a script alone, so two nodes can never both take the last room in a line. The keys expire a day
after their period ends (a run's after `RUN_TTL_S`). At start each node seeds the counters nobody counted yet from the
usage ledger (HSETNX), as the quotas are seeded.

Redis unreachable (`Link.call` answers None): a call that a budget applies to is refused with
503 `store_unavailable` (each node deciding alone would let N nodes spend N budgets; a call no
budget applies to goes on). A settle that cannot reach Redis is kept and sent when it answers
again, so what was spent is not lost; its hold lapses meanwhile. When Redis answers again, the
counters it may have lost (a restart with no data) are first seeded from the ledger again.
"""

from __future__ import annotations

import logging
import math

from agentos.clock import Clock
from agentos.coordination.link import Link
from agentos.errors import StoreError, StoreUnavailable
from agentos.store.base import Store
from agentos.tenancy.budgets import ADMISSION_HOLD_S, CALL_HOLD_S, DAY_S, MICROS, BudgetLimits, Budgets, Line, Refusal

log = logging.getLogger("agentos.coordination")

RUN_TTL_S = 30 * DAY_S  # a run's counter outlives any run (a run waits for a human a week at most)

# KEYS: (hash, lapse) per line. ARGV: hold_id, amount, now_ms, lapses_at_ms, then (limit, ttl_s)
# per line. Returns {0, 0, 0} when held, else {line index (from 1), spent, held by others}.
_PUT = """
local hold, amount, now, lapses = 'h:' .. ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local lines = #KEYS / 2
for i = 1, lines do
  local h, z = KEYS[2 * i - 1], KEYS[2 * i]
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  for _, id in ipairs(gone) do
    redis.call('HINCRBY', h, 'held', -tonumber(redis.call('HGET', h, 'h:' .. id) or '0'))
    redis.call('HDEL', h, 'h:' .. id)
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now) end
  local spent = tonumber(redis.call('HGET', h, 'spent') or '0')
  local held = tonumber(redis.call('HGET', h, 'held') or '0') - tonumber(redis.call('HGET', h, hold) or '0')
  if spent + held + amount > tonumber(ARGV[3 + 2 * i]) then return {i, spent, held} end
end
for i = 1, lines do
  local h, z, ttl = KEYS[2 * i - 1], KEYS[2 * i], ARGV[4 + 2 * i]
  redis.call('HINCRBY', h, 'held', amount - tonumber(redis.call('HGET', h, hold) or '0'))
  redis.call('HSET', h, hold, amount)
  redis.call('ZADD', z, lapses, ARGV[1])
  redis.call('EXPIRE', h, ttl)
  redis.call('EXPIRE', z, ttl)
end
return {0, 0, 0}
"""

# KEYS: (hash, lapse) per counter. ARGV: hold_id, cost, ttl_s (for a counter that lapsed away).
_SETTLE = """
local hold, cost = 'h:' .. ARGV[1], tonumber(ARGV[2])
for i = 1, #KEYS / 2 do
  local h, z = KEYS[2 * i - 1], KEYS[2 * i]
  local amount = redis.call('HGET', h, hold)
  if amount then
    redis.call('HINCRBY', h, 'held', -tonumber(amount))
    redis.call('HDEL', h, hold)
    redis.call('ZREM', z, ARGV[1])
  end
  if cost > 0 then redis.call('HINCRBY', h, 'spent', cost) end
  if redis.call('TTL', h) < 0 then redis.call('EXPIRE', h, ARGV[3]) end
end
return 1
"""


class ClusterBudgets(Budgets):
    def __init__(
        self,
        clock: Clock,
        limits: BudgetLimits,
        link: Link,
        *,
        call_hold_s: float = CALL_HOLD_S,
        admission_hold_s: float = ADMISSION_HOLD_S,
    ) -> None:
        super().__init__(clock, limits, call_hold_s=call_hold_s, admission_hold_s=admission_hold_s)
        self._link = link
        self._put_script = link.redis.register_script(_PUT)
        self._settle_script = link.redis.register_script(_SETTLE)
        self._unsent: list[tuple[str, tuple[str, ...], int]] = []  # settles Redis did not take
        self._store: Store | None = None  # the ledger seeded from (again when Redis is back)
        link.when_back(self._back)

    async def read_spent(self, counter: str) -> float:
        """What `counter` has spent, over every node (Redis's count). Raises: StoreUnavailable."""
        raw = await self._link.call(lambda: self._link.redis.hget(self._key(counter), "spent"))
        if raw is None and self._link.down:
            raise _unavailable()
        return int(raw or 0) / MICROS

    async def seed(self, store: Store) -> None:
        self._store = store
        await super().seed(store)

    async def _back(self) -> None:
        """Redis answers again: seed what it may have lost (a restart empty: HSETNX fills only
        counters it lacks), then send the settles kept meanwhile. The ledger may hold some of
        those already: counted twice then, never forgotten."""
        if self._store is not None:
            await _quietly_seed(self, self._store)
        await self._send_unsent()

    async def _seed(self, spent: dict[str, int], ends: dict[str, int]) -> None:
        """HSETNX: only counters that nothing counted yet (the first node to start over a ledger
        seeds the cluster; a node restarting later does not reset what the others counted)."""
        now = self._clock.now()

        async def write() -> None:
            async with self._link.redis.pipeline(transaction=False) as pipe:
                for counter, amount in spent.items():
                    key = self._key(counter)
                    pipe.hsetnx(key, "spent", amount)
                    ends_s = ends.get(counter)
                    pipe.expire(key, RUN_TTL_S if ends_s is None else math.ceil(ends_s + DAY_S - now))
                await pipe.execute()

        if spent:
            await self._link.call(write, recovery=True)

    async def _put(self, hold_id: str, lines: list[Line], amount: int, hold_s: float) -> Refusal | None:
        now = self._clock.now()
        keys = [key for line in lines for key in self._keys(line.counter)]
        args: list[str | int] = [hold_id, amount, int(now * 1000), int((now + hold_s) * 1000)]
        for line in lines:
            ttl = RUN_TTL_S if not line.ends_s else math.ceil(line.ends_s + DAY_S - now)
            args += [line.limit, max(ttl, math.ceil(hold_s))]
        answer = await self._link.call(lambda: self._put_script(keys=keys, args=args))
        if answer is None:
            raise _unavailable()
        index, spent, held = (int(v) for v in answer)
        return None if index == 0 else Refusal(lines[index - 1], spent, held)

    async def _settle(self, hold_id: str, counters: tuple[str, ...], cost: int) -> None:
        if not await self._send(hold_id, counters, cost):
            log.warning("budgets: Redis unreachable; a spend of %d millionths is kept until it answers", cost)
            self._unsent.append((hold_id, counters, cost))

    async def _send(self, hold_id: str, counters: tuple[str, ...], cost: int, *, recovery: bool = False) -> bool:
        keys = [key for counter in counters for key in self._keys(counter)]
        args: list[str | int] = [hold_id, cost, 2 * DAY_S]
        return await self._link.call(lambda: self._settle_script(keys=keys, args=args), recovery=recovery) is not None

    async def _send_unsent(self) -> None:
        unsent, self._unsent = self._unsent, []
        for index, (hold_id, counters, cost) in enumerate(unsent):
            if not await self._send(hold_id, counters, cost, recovery=True):
                self._unsent.extend(unsent[index:])
                return

    def _key(self, counter: str) -> str:
        return f"{self._link.prefix}budget:{counter}"

    def _keys(self, counter: str) -> tuple[str, str]:
        key = self._key(counter)
        return key, f"{key}:lapse"


async def _quietly_seed(budgets: ClusterBudgets, store: Store) -> None:
    try:
        await Budgets.seed(budgets, store)
    except StoreError as exc:  # the ledger unreachable now: Redis keeps what the nodes count from here
        log.warning("budgets: not seeded again from the ledger (%s)", exc)


def _unavailable() -> StoreUnavailable:
    return StoreUnavailable("budgets cannot be checked: Redis (coordination.redis_url) does not answer")
