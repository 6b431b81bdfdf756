"""What one tenant may consume: rates, quotas and its share of the provider.

The `[tenant_limits]` table of the config gives every tenant's defaults; a tenant's own row
(`/v1/admin/tenants`) may override any of them. 0 means "no limit" everywhere.

Every limit has a maximum (`MAX_PER_MINUTE`, `MAX_AT_ONCE`, `MAX_TOKENS_PER_DAY`, `MAX_BUDGET`): far above any
real use, and far below where an integer stops fitting the 64 bits that SQLite, PostgreSQL and
Redis hold (2**63 was taken before, and a counter compared with it in Redis or a row written
with it would fail later). Past it, the API answers 422 and the config stops start-up, both
naming the limit. A row stored before the maximum existed reads back at the maximum
(`clamp_overrides`).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import msgspec.inspect

MAX_PER_MINUTE = 10**9  # requests, turns or runs a minute: 16.7 million a second
MAX_AT_ONCE = 10**9  # sessions stored, turns or runs at once
MAX_TOKENS_PER_DAY = 10**12  # provider tokens a UTC day
MAX_WEIGHT = 1000
# A spending budget, in the operator's currency (the unit of `[models.*]` prices). Budgets are
# counted in millionths (`agentos.tenancy.budgets`), and 10**9 of them stay below 2**53: exact in
# a double, as Redis's Lua holds numbers.
MAX_BUDGET = 10**9
MAX_RETENTION_S = 100 * 365 * 86_400  # a century: a timestamp cut-off still far inside 64 bits of ms

PerMinute = Annotated[int, msgspec.Meta(ge=0, le=MAX_PER_MINUTE)]
AtOnce = Annotated[int, msgspec.Meta(ge=0, le=MAX_AT_ONCE)]
TokensPerDay = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS_PER_DAY)]
Weight = Annotated[int, msgspec.Meta(ge=1, le=MAX_WEIGHT)]
Budget = Annotated[float, msgspec.Meta(ge=0, le=MAX_BUDGET)]  # the bounds refuse nan and inf too
RetentionS = Annotated[int, msgspec.Meta(ge=0, le=MAX_RETENTION_S)]
Overrides = dict[str, int | float]  # a tenant's own limits, by name (budgets are the floats)


class TenantLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Attributes (0 = unlimited):
    requests_per_minute: every request of the tenant, all its keys together.
    key_requests_per_minute: every request of one key.
    turns_per_minute, runs_per_minute: turns and runs started.
    user_turns_per_minute, user_runs_per_minute: turns and runs started by one end user's token
        (`agentos.identity`), beside the tenant's; a key's are not counted here.
    user_max_concurrent_turns: turns running at once in one end user's sessions (429
        `user_concurrent_turns`).
    max_sessions: sessions stored at once (a quota: 403 when over).
    max_concurrent_turns, max_active_runs: at once (429 when over: they free themselves).
    tokens_per_day: provider tokens (prompt + completion) per UTC day (403 when over).
    weight: the tenant's share of the provider permits against other tenants' (fair queuing).
    budget_per_day, budget_per_month: what the tenant's model calls may cost per UTC day and
        calendar month (UTC), in the operator's currency (402 `budget_exceeded` when the next
        call's worst case does not fit; `agentos.tenancy.budgets`).
    retention_s: how long the tenant's sessions, runs, access rows and usage rows are kept after
        their last activity, in seconds; 0 keeps them forever (`agentos.runtime.retention`).
    """

    requests_per_minute: PerMinute = 0
    key_requests_per_minute: PerMinute = 0
    turns_per_minute: PerMinute = 0
    runs_per_minute: PerMinute = 0
    user_turns_per_minute: PerMinute = 0
    user_runs_per_minute: PerMinute = 0
    user_max_concurrent_turns: AtOnce = 0
    max_sessions: AtOnce = 0
    max_concurrent_turns: AtOnce = 0
    max_active_runs: AtOnce = 0
    tokens_per_day: TokensPerDay = 0
    weight: Weight = 1
    budget_per_day: Budget = 0.0
    budget_per_month: Budget = 0.0
    retention_s: RetentionS = 0


def _maxima() -> dict[str, int | float]:
    info = msgspec.inspect.type_info(TenantLimits)
    assert isinstance(info, msgspec.inspect.StructType)
    bounded = (msgspec.inspect.IntType, msgspec.inspect.FloatType)
    return {f.name: f.type.le for f in info.fields if isinstance(f.type, bounded) and f.type.le is not None}


MAXIMA: dict[str, int | float] = _maxima()  # each limit's maximum, by name


def _whole() -> frozenset[str]:
    info = msgspec.inspect.type_info(TenantLimits)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(f.name for f in info.fields if isinstance(f.type, msgspec.inspect.IntType))


WHOLE_LIMITS = _whole()  # the limits that are integers (every one but the budgets)


def clamp_overrides(overrides: Overrides) -> Overrides:
    """A stored row's overrides with each value over its limit's maximum read as the maximum.

    Only a row written before the maxima existed can hold one: the same meaning ("as good as
    no limit"), in a value that fits everywhere. Unknown names pass (a newer version's)."""
    if all(value <= MAXIMA.get(name, value) for name, value in overrides.items()):
        return overrides
    return {name: min(value, MAXIMA.get(name, value)) for name, value in overrides.items()}
