"""The permit pool's heap chooses exactly the tenant a full scan would choose.

The heap (`PermitPool._next_tenant`) is kept lazily: entries may be stale, pushed again when
popped. This drives random requests, releases, withdrawals and weight changes over four
tenants and compares every choice, tie-breaks included, with the plain scan it replaced.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentos.kernel.permits import PermitPool
from agentos.kernel.tenants import Tenants, TenantShare

TENANTS = ["a", "b", "c", "d"]


def scan(pool: PermitPool) -> str | None:
    """The reference: every waiting tenant below its cap, lowest (held/weight, served, oldest)."""
    best, best_key = None, (math.inf, 0, 0)
    for tenant, line in pool._lines.items():
        if pool.held_by(tenant) >= pool.tenant_cap:
            continue
        weight = pool._tenants.share(tenant).weight
        key = (pool.held_by(tenant) / weight, pool._served.get(tenant, 0), pool._waiting[next(iter(line))][2])
        if key < best_key:
            best, best_key = tenant, key
    return best


request = st.tuples(st.just("request"), st.sampled_from(TENANTS))
operation = st.one_of(  # requests thrice as often: lines form, and several tenants wait at once
    request,
    request,
    request,
    st.tuples(st.just("release"), st.integers(0, 10_000)),
    st.tuples(st.just("withdraw"), st.integers(0, 10_000)),
    st.tuples(st.just("weight"), st.sampled_from(TENANTS), st.integers(1, 4)),
)


@settings(max_examples=1000, deadline=None)
@given(st.lists(operation, max_size=200), st.integers(1, 5), st.sampled_from([0.0, 0.25]))
def test_the_heap_chooses_what_a_scan_chooses(ops: list[tuple[Any, ...]], limit: int, reserve: float) -> None:
    tenants = Tenants(TenantShare())
    pool = PermitPool(limit, 30.0, tenants, fair_reserve=reserve)
    holders: list[str] = []
    waiters: list[str] = []
    for n, op in enumerate(ops):
        if op[0] == "request":
            holder = f"h{n}"
            (holders if pool.request(holder, op[1], now=0.0) else waiters).append(holder)
        elif op[0] == "release" and holders:
            expected = scan_after_release(pool, holders, op[1])  # a full pool: one permit frees
            granted = pool.release(holders.pop(op[1] % len(holders)))
            assert [pool._holders[g] for g in granted] == ([] if expected is None else [expected])
            for holder in granted:
                waiters.remove(holder)
                holders.append(holder)
        elif op[0] == "withdraw" and waiters:
            pool.withdraw(waiters.pop(op[1] % len(waiters)))
        elif op[0] == "weight":
            tenants.configure(op[1], TenantShare(weight=op[2]))
        assert pool._next_tenant() == scan(pool)


def scan_after_release(pool: PermitPool, holders: list[str], index: int) -> str | None:
    """What the scan would grant after the release of `holders[index]`, without releasing it.
    (Nobody waits while a permit is free, so a release frees exactly one and grants at most one.)"""
    holder = holders[index % len(holders)]
    tenant = pool._holders[holder]
    pool._held.add(tenant, -1)
    try:
        return scan(pool)
    finally:
        pool._held.add(tenant, 1)
