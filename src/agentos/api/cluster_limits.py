"""The API's rate limits, decided in Redis for every node together.

`ClusterLimiters` is `api.ratelimit.Limiters` with its awaitable half (`admit_request`,
`admit_start` for turns and runs, the refunds) answered by the Redis GCRA (`coordination.gcra`): a
limited request costs one round trip (its key's and its tenant's limit in one script call), a
caller without limits none. The headers and 429s are built from the decisions exactly as in
process.

While Redis is down (`Link.call` answers None) the in-process limiter of the base class decides
instead, with this node's share of each limit: `ceil(limit / coordination.expected_nodes)`.
Then N nodes together admit about the cluster's limit, not N times it, which is better than
unlimited and better than refusing everything; it is exact only if the load balancer spreads
evenly. A refund that cannot reach Redis is lost (the tenant loses one unit for a minute).
"""

from __future__ import annotations

import math
from dataclasses import replace

import msgspec
from aiohttp import web

from agentos.api.ratelimit import STARTS, Limiters, Starts, Work, limit_key, raise_if_refused
from agentos.clock import Clock
from agentos.config.tenants import TenantLimits
from agentos.coordination.gcra import RedisGcra
from agentos.coordination.link import BackgroundCalls, Link
from agentos.errors import RateLimited
from agentos.tenancy.principal import Principal
from agentos.tenancy.ratelimit import Decision

_RATES = ("requests_per_minute", "key_requests_per_minute", "turns_per_minute", "runs_per_minute")


class ClusterLimiters(Limiters):
    def __init__(self, clock: Clock, link: Link) -> None:
        super().__init__(clock)
        self._link = link
        self._gcra = RedisGcra(link.redis)
        self._shares: dict[TenantLimits, TenantLimits] = {}
        self._background = BackgroundCalls()

    async def admit_request(self, who: Principal) -> tuple[dict[str, str], web.Response | None]:
        limits = who.limits
        wanted: list[tuple[str, int]] = []
        if limits.key_requests_per_minute:
            wanted.append((self._key("key", limit_key(who)), limits.key_requests_per_minute))
        if limits.requests_per_minute:
            wanted.append((self._key("tenant", who.tenant_id), limits.requests_per_minute))
        decisions = await self._link.call(lambda: self._gcra.take(wanted))
        if decisions is None:
            return self.check_request(self._share(who))
        by_key = decisions.pop(0) if limits.key_requests_per_minute else None
        by_tenant = decisions[0] if decisions else None
        return self.answer(who, by_key, by_tenant)

    async def admit_start(self, work: Work, who: Principal) -> None:
        starts = STARTS[work]
        # An end user's own rate is kept per node (its tenant's rate, in Redis, bounds the sum).
        self.check_user_start(starts, who)
        try:
            await self._admit_tenant(starts, who)
        except RateLimited:
            self._refund_user(starts, who)
            raise

    async def _admit_tenant(self, starts: Starts, who: Principal) -> None:
        """One start from the tenant's bucket in Redis; from the node's share while Redis is down.

        Raises:
            RateLimited: refused (`starts.code`), with when to retry."""
        decision = await self._decide_one(starts.what, who.tenant_id, starts.tenant_rate(who.limits))
        if decision is None:
            self.check_tenant_start(starts, self._share(who))
        else:
            raise_if_refused(decision, starts.code, starts.what)

    def refund_start(self, work: Work, who: Principal) -> None:
        if self._link.down:  # the unit was taken here, from the node's share
            super().refund_start(work, self._share(who))
        else:
            starts = STARTS[work]
            self._refund(starts.what, who.tenant_id, starts.tenant_rate(who.limits))
            self._refund_user(starts, who)

    async def _decide_one(self, what: str, tenant_id: str, per_minute: int) -> Decision | None:
        """The decision in Redis; an allowing one when there is no limit; None: Redis is down."""
        if not per_minute:
            return Decision(True, 0, 0, 0.0, 0.0, 0.0)
        decisions = await self._link.call(lambda: self._gcra.take([(self._key(what, tenant_id), per_minute)]))
        return None if decisions is None else decisions[0]

    def _refund(self, what: str, tenant_id: str, per_minute: int) -> None:
        """Give the unit back in the background: a refund runs on an error path, maybe while
        the request is being cancelled, where awaiting Redis is not wanted."""
        if per_minute:
            key = self._key(what, tenant_id)
            self._background.spawn(self._link.call(lambda: self._gcra.refund(key, per_minute)))

    async def flush(self) -> None:
        """Wait for the refunds started so far (each is bounded by the link's timeout)."""
        await self._background.flush()

    def _key(self, what: str, name: str) -> str:
        return f"{self._link.prefix}rate:{what}:{name}"

    def _share(self, who: Principal) -> Principal:
        """`who` with this node's share of each rate limit (for the outage fallback)."""
        nodes = self._link.expected_nodes
        if nodes == 1:
            return who
        share = self._shares.get(who.limits)
        if share is None:
            changes = {name: math.ceil(getattr(who.limits, name) / nodes) for name in _RATES}
            share = self._shares[who.limits] = msgspec.structs.replace(who.limits, **changes)
            if len(self._shares) > 1024:  # bounded: limits change rarely, tenants are many
                self._shares.clear()
        return replace(who, limits=share)
