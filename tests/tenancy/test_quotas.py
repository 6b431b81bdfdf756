"""Quotas as plain objects: sessions held, tokens per UTC day (a FakeClock on the epoch)."""

from __future__ import annotations

import calendar
from dataclasses import replace

import pytest

from agentos.config.tenants import TenantLimits
from agentos.errors import QuotaExceeded
from agentos.tenancy.principal import OPEN_PRINCIPAL, Principal
from agentos.tenancy.quotas import DAY_S, Quotas
from agentos.testing import FakeClock

NOON = float(calendar.timegm((2026, 12, 1, 12, 0, 0)))


def _who(tenant: str = "t1", **limits: int) -> Principal:
    return replace(OPEN_PRINCIPAL, tenant_id=tenant, limits=TenantLimits(**limits))


def test_sessions_quota_counts_reservations_and_releases() -> None:
    quotas = Quotas(FakeClock(NOON))
    who = _who(max_sessions=2)
    quotas.reserve_session(who)
    quotas.reserve_session(who)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve_session(who)
    assert (refused.value.status, refused.value.code) == (403, "quota_sessions")
    quotas.reserve_session(_who("t2", max_sessions=2))  # another tenant's count is its own
    quotas.release_session("t1")
    quotas.reserve_session(who)
    assert quotas.sessions("t1") == 2


def test_tokens_quota_refuses_until_the_next_utc_day() -> None:
    clock = FakeClock(NOON)
    quotas = Quotas(clock)
    who = _who(tokens_per_day=100)
    quotas.add_tokens("t1", 99)
    quotas.check_tokens(who)  # under: a turn may start (and may end the day a little over)
    quotas.add_tokens("t1", 30)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_tokens(who)
    assert refused.value.code == "quota_tokens_per_day"
    assert refused.value.retry_after_s == 12 * 3600  # noon to midnight UTC
    quotas.check_tokens(_who("t2", tokens_per_day=100))
    clock.advance(12 * 3600 - 1)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_tokens(who)
    assert refused.value.retry_after_s == 1
    clock.advance(1)  # 00:00 UTC
    quotas.check_tokens(who)
    assert quotas.tokens_today("t1") == 0


def test_no_limit_means_no_refusal() -> None:
    quotas = Quotas(FakeClock(NOON))
    quotas.add_tokens("t1", 10**9)
    quotas.check_tokens(_who())
    for _ in range(100):
        quotas.reserve_session(_who())


def test_seeded_counts_count() -> None:
    quotas = Quotas(FakeClock(NOON))
    assert quotas.day_start_ms() == (NOON - 12 * 3600) * 1000 == (NOON // DAY_S) * DAY_S * 1000
    quotas.seed({"t1": 3}, {"t1": 500})
    with pytest.raises(QuotaExceeded):
        quotas.reserve_session(_who(max_sessions=3))
    with pytest.raises(QuotaExceeded):
        quotas.check_tokens(_who(tokens_per_day=500))
