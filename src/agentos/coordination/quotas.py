"""The tenants' quota counters in Redis, for every node together.

`ClusterQuotas` is `tenancy.quotas.Quotas` with the counters that decide kept in Redis:

- sessions per tenant: `<prefix>quota:sessions:<tenant>`, checked and incremented in one script
  before a session is created (given back if the create fails), decremented (never below 0)
  when one is deleted;
- provider tokens per tenant and UTC day: `<prefix>quota:tokens:<tenant>:<day>` (INCRBY as
  usage is known; it expires two days later, after its day is over).

Seeding: each node still seeds its in-process counters from its store at start; `share()` then
writes them to Redis with SET NX, so the first node to start over an existing store seeds the
cluster and a node (re)starting later does not reset what the others counted; after an outage
each node does it again (a Redis that restarted empty starts from the nodes' own counts, not
from 0; one that kept its data is left as it is). Until `share()`
the counters are local only (start-up replays usage already in the store; counting it in Redis
again would count it twice).

Writes that need no answer (a release, tokens used) go in the background. The in-process
counters are kept up to date too: while Redis is down (`Link.call` answers None) they decide,
each node by what it saw, and what happens meanwhile is not added to Redis afterwards.
"""

from __future__ import annotations

from agentos.clock import Clock
from agentos.coordination.link import BackgroundCalls, Link
from agentos.tenancy.principal import Principal
from agentos.tenancy.quotas import DAY_S, Quotas, sessions_exceeded

_TOKENS_TTL_S = 2 * DAY_S

# KEYS[1]: the tenant's session count; ARGV[1]: its quota (0: none). Returns {taken, held}.
_RESERVE = """
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[1])
if limit > 0 and held >= limit then return {0, held} end
return {1, redis.call('INCR', KEYS[1])}
"""

_RELEASE = """
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held > 0 then return redis.call('DECR', KEYS[1]) end
return 0
"""


class ClusterQuotas(Quotas):
    def __init__(self, clock: Clock, link: Link) -> None:
        super().__init__(clock)
        self._link = link
        self._reserve = link.redis.register_script(_RESERVE)
        self._release = link.redis.register_script(_RELEASE)
        self._shared = False
        self._background = BackgroundCalls()

    async def share(self) -> None:
        """Seed Redis from this node's counts (SET NX: only counters nobody wrote yet), and
        decide in Redis from now on."""
        day = self.today()
        sessions = {self._sessions_key(t): n for t, n in self._sessions.items()}
        tokens = {self._tokens_key(t, day): n for t, n in self._tokens.items()}

        async def seed() -> None:
            async with self._link.redis.pipeline(transaction=False) as pipe:
                for key, count in sessions.items():
                    pipe.set(key, count, nx=True)
                for key, count in tokens.items():
                    pipe.set(key, count, nx=True, ex=_TOKENS_TTL_S)
                await pipe.execute()

        await self._link.call(seed, recovery=True)  # at start, or re-seeding after an outage
        if not self._shared:
            self._shared = True
            self._link.when_back(self.share)  # a Redis that restarted empty is seeded again

    async def admit_session(self, who: Principal) -> None:
        if not self._shared:
            return self.reserve_session(who)
        key, limit = self._sessions_key(who.tenant_id), who.limits.max_sessions
        answer = await self._link.call(lambda: self._reserve(keys=[key], args=[limit]))
        if answer is None:
            return self.reserve_session(who)
        taken, held = (int(v) for v in answer)
        if not taken:
            raise sessions_exceeded(held)
        self._sessions[who.tenant_id] = self._sessions.get(who.tenant_id, 0) + 1  # the fallback's view

    def release_session(self, tenant_id: str) -> None:
        super().release_session(tenant_id)
        if self._shared:
            key = self._sessions_key(tenant_id)
            self._background.spawn(self._link.call(lambda: self._release(keys=[key])))

    async def admit_tokens(self, who: Principal) -> None:
        limit = who.limits.tokens_per_day
        if not limit or not self._shared:
            return self.check_tokens(who)
        key = self._tokens_key(who.tenant_id, self.today())
        used = await self._link.call(lambda: self._link.redis.get(key))
        if used is None and self._link.down:
            return self.check_tokens(who)
        self.refuse_tokens(int(used or 0), limit)

    def add_tokens(self, tenant_id: str, tokens: int) -> None:
        super().add_tokens(tenant_id, tokens)
        if tokens > 0 and self._shared:
            key = self._tokens_key(tenant_id, self.today())

            async def count() -> None:
                async with self._link.redis.pipeline(transaction=True) as pipe:
                    pipe.incrby(key, tokens)
                    pipe.expire(key, _TOKENS_TTL_S)
                    await pipe.execute()

            self._background.spawn(self._link.call(count))

    async def flush(self) -> None:
        """Wait for the background writes started so far (each is bounded by the link's timeout)."""
        await self._background.flush()

    def _sessions_key(self, tenant_id: str) -> str:
        return f"{self._link.prefix}quota:sessions:{tenant_id}"

    def _tokens_key(self, tenant_id: str, day: int) -> str:
        return f"{self._link.prefix}quota:tokens:{tenant_id}:{day}"
