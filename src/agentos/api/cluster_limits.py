"""The API's rate limits, decided in Redis for every node together.

`ClusterLimiters` is `api.ratelimit.Limiters` with its awaitable half (`admit_request`,
`admit_start` for turns and runs, the refunds) answered by the Redis GCRA (`coordination.gcra`): a
limited request costs one round trip (its key's and its tenant's limit in one script call), a
caller without limits none; so does a turn or run start (an end user's own rate and the tenant's,
in one call: a user's `user_turns_per_minute` holds across the cluster as the tenant's does).
The headers and 429s are built from the decisions exactly as in process.

While Redis is down (`Link.call` answers None) the in-process limiter of the base class decides
instead, with this node's share of each limit: `ceil(limit / coordination.expected_nodes)`.
Then N nodes together admit about the cluster's limit, not N times it, which is better than
unlimited and better than refusing everything; it is exact only if the load balancer spreads
evenly. A refund that cannot reach Redis is lost (the tenant loses one unit for a minute).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import msgspec
from aiohttp import web

from agentos.api.ratelimit import STARTS, Limiters, Starts, Work, limit_key, raise_if_refused, user_key
from agentos.clock import Clock
from agentos.config.tenants import TenantLimits
from agentos.coordination.gcra import RedisGcra
from agentos.coordination.link import BackgroundCalls, Link
from agentos.tenancy.principal import Principal

_RATES = (
    "requests_per_minute",
    "key_requests_per_minute",
    "turns_per_minute",
    "runs_per_minute",
    "user_turns_per_minute",
    "user_runs_per_minute",
)


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
        """One start from the end user's bucket and the tenant's, in Redis, in one call (a
        refusal takes from neither); from this node's shares while Redis is down.

        Raises:
            RateLimited: refused (`code`), naming whose limit, with when to retry."""
        starts = STARTS[work]
        wanted = self._buckets(starts, who)
        if not wanted:
            return
        decisions = await self._link.call(lambda: self._gcra.take([(key, rate) for key, rate, _ in wanted]))
        if decisions is None:
            self.check_start(starts, self._share(who))
            return
        for (_, _, whose), decision in zip(wanted, decisions, strict=True):
            raise_if_refused(decision, starts.code, starts.what, whose)

    def refund_start(self, work: Work, who: Principal) -> None:
        if self._link.down:  # the unit was taken here, from the node's share
            super().refund_start(work, self._share(who))
        else:
            self._refund(self._buckets(STARTS[work], who))

    def _buckets(self, starts: Starts, who: Principal) -> list[tuple[str, int, str]]:
        """(Redis key, per minute, whose) of the limits a start draws from: the end user's own
        (`user_key`; none for a tenant key) and the tenant's, those that are set."""
        user_rate, tenant_rate = starts.user_rate(who.limits), starts.tenant_rate(who.limits)
        bucket = user_key(who)
        wanted = [(self._key(starts.what, bucket), user_rate, "user")] if user_rate and bucket is not None else []
        if tenant_rate:
            wanted.append((self._key(starts.what, who.tenant_id), tenant_rate, "tenant"))
        return wanted

    def _refund(self, buckets: list[tuple[str, int, str]]) -> None:
        """Give the units back in the background: a refund runs on an error path, maybe while
        the request is being cancelled, where awaiting Redis is not wanted."""
        for key, per_minute, _ in buckets:
            self._background.spawn(self._link.call(functools.partial(self._gcra.refund, key, per_minute)))

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
