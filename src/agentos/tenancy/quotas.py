"""Per-tenant quotas: sessions stored, and provider tokens per UTC day.

A quota is not a rate: waiting a few seconds does not free it, so it answers 403 with a code
that names it (`quota_sessions`, `quota_tokens_per_day`), not 429. The tokens quota renews at
midnight UTC and says so with `Retry-After`; the sessions quota frees only when the tenant
deletes sessions.

Counters, not queries: each check is a dict lookup. They are seeded at start from the store
(`Store.session_counts`, `Store.token_usage_since` the start of the UTC day), so they survive a
restart, and kept up to date by the API: a session reserved before it is created (and given
back if the create fails, so concurrent creates cannot overshoot), released when deleted; a
turn's tokens added when its usage is known. Usage is counted after the fact (a provider
reports it at the end of a call), so a tenant may end a day a little over its quota: the check
refuses the next turn or run, it does not cut one short.

The wall clock is injected (`clock.now()` = epoch seconds); tests move a FakeClock across
midnight. The counters are per process, like the rate limiters; with `coordination.redis_url`
set, `agentos.coordination.quotas.ClusterQuotas` keeps them in Redis for every node together.
The API awaits `admit_session` and `admit_tokens`, which that subclass answers from Redis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from agentos.clock import Clock
from agentos.errors import QuotaExceeded
from agentos.tenancy.principal import Principal

DAY_S = 86_400


class Quotas:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._sessions: dict[str, int] = {}
        self._tokens: dict[str, int] = {}
        self._day = self._today()

    def day_start_ms(self) -> int:
        """Midnight UTC today, in epoch milliseconds: where today's token usage starts."""
        return self._today() * DAY_S * 1000

    def seed(self, sessions: Mapping[str, int], tokens_today: Mapping[str, int]) -> None:
        """Start from what the store holds: sessions per tenant, tokens per tenant since
        `day_start_ms()`."""
        self._sessions = dict(sessions)
        self._tokens = dict(tokens_today)
        self._day = self._today()

    async def admit_session(self, who: Principal) -> None:
        """`reserve_session`, awaitable."""
        self.reserve_session(who)

    async def admit_tokens(self, who: Principal) -> None:
        """`check_tokens`, awaitable."""
        self.check_tokens(who)

    # -- sessions ------------------------------------------------------------------------------

    def sessions(self, tenant_id: str) -> int:
        return self._sessions.get(tenant_id, 0)

    def reserve_session(self, who: Principal) -> None:
        """Count a session about to be created; `release_session` if creating it fails.

        Raises: QuotaExceeded (`quota_sessions`): the tenant holds `max_sessions` already.
        """
        limit = who.limits.max_sessions
        held = self._sessions.get(who.tenant_id, 0)
        if limit and held >= limit:
            raise sessions_exceeded(held)
        self._sessions[who.tenant_id] = held + 1

    def release_session(self, tenant_id: str) -> None:
        """A session was deleted (or its create failed)."""
        held = self._sessions.get(tenant_id, 0)
        if held > 1:
            self._sessions[tenant_id] = held - 1
        else:
            self._sessions.pop(tenant_id, None)

    # -- tokens per day --------------------------------------------------------------------------

    def tokens_today(self, tenant_id: str) -> int:
        self._roll()
        return self._tokens.get(tenant_id, 0)

    def check_tokens(self, who: Principal) -> None:
        """Before a new turn or run.

        Raises: QuotaExceeded (`quota_tokens_per_day`, Retry-After: until midnight UTC).
        """
        limit = who.limits.tokens_per_day
        if not limit:
            return
        self.refuse_tokens(self.tokens_today(who.tenant_id), limit)

    def refuse_tokens(self, used: int, limit: int) -> None:
        """Raises: QuotaExceeded when `used` tokens today reach `limit` (> 0)."""
        if used >= limit:
            wait = max(1, math.ceil((self._today() + 1) * DAY_S - self._clock.now()))
            raise QuotaExceeded(
                f"the tenant used {used} provider tokens today, its quota is {limit}; it renews at 00:00 UTC",
                code="quota_tokens_per_day",
                retry_after_s=wait,
            )

    def add_tokens(self, tenant_id: str, tokens: int) -> None:
        """Provider tokens (prompt + completion) a call of the tenant used, counted today."""
        if tokens > 0:
            self._roll()
            self._tokens[tenant_id] = self._tokens.get(tenant_id, 0) + tokens

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:  # a new UTC day: yesterday's usage no longer counts
            self._day = today
            self._tokens.clear()

    def today(self) -> int:
        """The UTC day number (days since the epoch)."""
        return self._today()

    def _today(self) -> int:
        return int(self._clock.now() // DAY_S)


def sessions_exceeded(held: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"the tenant holds {held} sessions, its quota; delete some to open more", code="quota_sessions"
    )
