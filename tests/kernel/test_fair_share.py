"""Tenants share the provider permits by weighted fair queuing, with a reserve for newcomers."""

from __future__ import annotations

from typing import Any

from agentos.kernel import (
    CancelRequested,
    Command,
    FailTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    ProviderReleased,
    StreamRequested,
    TenantConfigured,
    Tick,
    TurnEnded,
    TurnSubmitted,
)


def make(**limits: Any) -> Kernel:
    return Kernel(KernelLimits(**limits))


def submit(k: Kernel, tenant: str, turn: str, now: float = 0.0) -> list[Command]:
    """A turn of `tenant` in a session of its own (named after the turn)."""
    return k.handle(TurnSubmitted(f"s-{turn}", turn, tenant_id=tenant), now)


def granted(commands: list[Command]) -> list[str]:
    return [c.turn_id for c in commands if isinstance(c, GrantPermit)]


def finish(k: Kernel, turn: str, now: float = 0.0) -> list[str]:
    """The turn's stream closes and its task ends; returns who got the freed permit."""
    grants = granted(k.handle(ProviderReleased(turn), now))
    k.handle(TurnEnded(turn), now)
    return grants


def test_a_newcomer_is_granted_from_the_reserve_at_once_while_another_tenant_floods() -> None:
    k = make(concurrency_limit=10, fair_reserve=0.1)
    k.handle(TenantConfigured("A"), 0.0)
    k.handle(TenantConfigured("B"), 0.0)
    flood = [granted(submit(k, "A", f"a{i}")) for i in range(20)]
    assert sum(map(len, flood)) == 9  # A may not take the reserve
    assert k.statistics().permits_in_use == 9 and k.tenant_usage("A").waiting_for_permit == 11
    assert granted(submit(k, "B", "b1")) == ["b1"]  # no wait for a release
    assert k.tenant_usage("B").permits_held == 1


def test_the_newcomers_next_requests_win_the_releases_over_older_waiters() -> None:
    k = make(concurrency_limit=10, fair_reserve=0.1)
    k.handle(TenantConfigured("A"), 0.0)
    k.handle(TenantConfigured("B"), 0.0)
    for i in range(20):
        submit(k, "A", f"a{i}")
    submit(k, "B", "b1")
    assert granted(submit(k, "B", "b2")) == []  # the pool is full
    assert finish(k, "a0") == ["b2"]  # B holds 1 of 10, A 8: B is owed it, A's waiters are older
    assert finish(k, "a1") == ["a9"]  # B waits no more: A's oldest waiter


def test_a_tenant_seen_once_makes_the_server_shared() -> None:
    k = make(concurrency_limit=10, fair_reserve=0.2)
    assert not k.statistics().shared and k.statistics().tenant_permit_cap == 10
    submit(k, "B", "b1")
    finish(k, "b1")
    assert not k.statistics().shared  # one tenant so far
    grants = [granted(submit(k, "A", f"a{i}")) for i in range(10)]
    assert k.statistics().shared and k.statistics().tenant_permit_cap == 8
    assert sum(map(len, grants)) == 8


def test_a_single_tenant_server_keeps_the_whole_pool() -> None:
    k = make(concurrency_limit=10, fair_reserve=0.5)
    grants = [granted(submit(k, "default", f"t{i}")) for i in range(12)]
    assert sum(map(len, grants)) == 10
    assert not k.statistics().shared


def test_without_a_reserve_the_flooder_takes_every_permit_and_the_newcomer_waits_for_a_release() -> None:
    k = make(concurrency_limit=4, fair_reserve=0.0)
    k.handle(TenantConfigured("A"), 0.0)
    k.handle(TenantConfigured("B"), 0.0)
    for i in range(8):
        submit(k, "A", f"a{i}")
    assert k.tenant_usage("A").permits_held == 4
    assert granted(submit(k, "B", "b1")) == []
    assert finish(k, "a0") == ["b1"]  # fair queuing still puts it ahead of A's older waiters


def test_a_tenant_over_the_cap_when_the_server_becomes_shared_keeps_what_it_holds() -> None:
    k = make(concurrency_limit=4, fair_reserve=0.25)
    for i in range(5):
        submit(k, "A", f"a{i}")
    assert k.tenant_usage("A").permits_held == 4  # alone: the whole pool
    assert granted(submit(k, "B", "b1")) == []  # nothing is taken back
    assert finish(k, "a0") == ["b1"]  # A holds 3, its cap: not eligible
    assert finish(k, "a1") == ["a4"]  # A holds 2, below its cap again
    assert k.tenant_usage("A").permits_held == 3


def test_releases_go_two_to_one_by_weight() -> None:
    k = make(concurrency_limit=6, fair_reserve=0.0)
    k.handle(TenantConfigured("A", weight=2), 0.0)
    k.handle(TenantConfigured("B", weight=1), 0.0)
    for i in range(6):
        submit(k, "C", f"c{i}")  # C fills the pool
    for i in range(30):
        submit(k, "A", f"a{i}")
        submit(k, "B", f"b{i}")
    order = [g for i in range(6) for g in finish(k, f"c{i}")]
    assert [t[0] for t in order] == ["a", "b", "a", "b", "a", "a"]  # ties: the one served longer ago
    assert (k.tenant_usage("A").permits_held, k.tenant_usage("B").permits_held) == (4, 2)
    holders = list(order)
    for _ in range(24):  # in steady state every release keeps the 2:1 split
        holders += finish(k, holders.pop(0))
        assert (k.tenant_usage("A").permits_held, k.tenant_usage("B").permits_held) == (4, 2)


def test_with_equal_holdings_tenants_take_turns_and_each_ones_waiters_keep_their_order() -> None:
    k = make(concurrency_limit=1, fair_reserve=0.0)
    submit(k, "A", "a0")
    for i in range(1, 4):
        submit(k, "A", f"a{i}", now=float(i))
    submit(k, "B", "b1")
    submit(k, "B", "b2")
    assert finish(k, "a0") == ["b1"]  # A (0) and B (0) tie: A was served more recently
    assert finish(k, "b1") == ["a1"]  # the tenants take turns; each one's waiters in order
    assert finish(k, "a1") == ["b2"]
    assert finish(k, "b2") == ["a2"]
    assert finish(k, "a2") == ["a3"]


def test_waiters_expire_in_arrival_order_across_tenants() -> None:
    k = make(concurrency_limit=1, fair_reserve=0.0, permit_wait_timeout_s=10)
    submit(k, "A", "a0")
    submit(k, "B", "b1", now=1.0)
    submit(k, "A", "a1", now=2.0)
    submit(k, "B", "b2", now=3.0)
    assert k.next_deadline() == 11.0
    assert k.handle(Tick(), 12.5) == [
        FailTurn("b1", "provider_limit_timeout"),
        FailTurn("a1", "provider_limit_timeout"),
    ]
    assert k.next_deadline() == 13.0
    assert (k.tenant_usage("A").waiting_for_permit, k.tenant_usage("B").waiting_for_permit) == (0, 1)
    assert finish(k, "a0") == ["b2"]


def test_a_withdrawn_waiter_leaves_its_tenants_line_at_once() -> None:
    k = make(concurrency_limit=1, fair_reserve=0.0)
    submit(k, "A", "a0")
    submit(k, "B", "b1")
    submit(k, "A", "a1")
    k.handle(CancelRequested("s-b1"), 0.0)
    assert k.tenant_usage("B").waiting_for_permit == 0 and k.statistics().waiting_for_permit == 1
    assert finish(k, "a0") == ["a1"]


def test_a_run_stream_draws_on_its_tenants_share() -> None:
    k = make(concurrency_limit=2, fair_reserve=0.0)
    submit(k, "A", "a0")
    submit(k, "A", "a1")
    submit(k, "A", "a2")
    assert k.handle(StreamRequested("st1", tenant_id="B"), 0.0) == []
    assert finish(k, "a0") == ["st1"]  # B holds nothing: ahead of A's older waiter
    assert k.tenant_usage("B").permits_held == 1


def test_every_exit_path_returns_the_counts_to_zero() -> None:
    k = make(concurrency_limit=2, fair_reserve=0.5, permit_wait_timeout_s=5)
    k.handle(TenantConfigured("A"), 0.0)
    k.handle(TenantConfigured("B"), 0.0)
    submit(k, "A", "a0")
    k.handle(TurnSubmitted("s-a0", "a0b", tenant_id="A"), 0.0)  # supersedes a0, waits (cap 1)
    submit(k, "B", "b0")
    submit(k, "B", "b1")  # waits
    k.handle(CancelRequested("s-b0"), 0.0)  # cancelled while streaming
    k.handle(Tick(), 6.0)  # a0b and b1 time out
    for turn in ["a0", "a0b", "b0", "b1"]:
        k.handle(ProviderReleased(turn), 6.0)
        k.handle(TurnEnded(turn), 6.0)
    for tenant in ["A", "B"]:
        usage = k.tenant_usage(tenant)
        assert (usage.permits_held, usage.waiting_for_permit, usage.turns_in_flight) == (0, 0, 0)
    stats = k.statistics()
    assert (stats.permits_in_use, stats.waiting_for_permit, stats.in_flight_turns) == (0, 0, 0)


def test_a_pool_of_one_permit_stays_grantable_when_shared() -> None:
    k = make(concurrency_limit=1, fair_reserve=0.9)
    k.handle(TenantConfigured("A"), 0.0)
    k.handle(TenantConfigured("B"), 0.0)
    assert k.statistics().tenant_permit_cap == 1
    assert granted(submit(k, "A", "a0")) == ["a0"]


def test_a_heavy_tenant_at_its_cap_is_passed_over_whatever_its_weight() -> None:
    k = make(concurrency_limit=4, fair_reserve=0.5)  # shared: at most 2 each
    k.handle(TenantConfigured("A", weight=10), 0.0)
    k.handle(TenantConfigured("B", weight=1), 0.0)
    for i in range(3):
        submit(k, "A", f"a{i}")
        submit(k, "B", f"b{i}")
    assert finish(k, "b0") == ["b2"]  # A's 2/10 is lower than B's 1/1, but A is at its cap
