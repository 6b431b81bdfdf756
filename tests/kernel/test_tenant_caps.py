"""Per-tenant caps: admitted turns and active runs, refused with the tenant's own code."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.kernel import (
    AcceptRun,
    AcceptTurn,
    CancelRequested,
    GrantPermit,
    HumanRequested,
    Kernel,
    KernelLimits,
    RejectRun,
    RejectTurn,
    RunEnded,
    RunResumed,
    RunSubmitted,
    SessionClosed,
    StartRun,
    TenantConfigured,
    TenantShare,
    TurnEnded,
    TurnSubmitted,
)


def make(**limits: Any) -> Kernel:
    return Kernel(KernelLimits(**limits))


def test_over_its_concurrent_turns_a_tenants_turn_is_refused_and_others_are_not() -> None:
    k = make(retry_after_s=2)
    k.handle(TenantConfigured("A", max_concurrent_turns=2), 0.0)
    k.handle(TurnSubmitted("s1", "t1", tenant_id="A"), 0.0)
    k.handle(TurnSubmitted("s2", "t2", tenant_id="A"), 0.0)
    before = k.statistics()
    assert k.handle(TurnSubmitted("s3", "t3", tenant_id="A"), 0.0) == [RejectTurn("t3", 2, "tenant_concurrent_turns")]
    assert k.turn_state("t3") is None and k.statistics().in_flight_turns == before.in_flight_turns
    assert k.statistics().rejected_total == 1
    assert k.handle(TurnSubmitted("s4", "t4", tenant_id="B"), 0.0)[0] == AcceptTurn("t4")
    k.handle(TurnEnded("t1"), 1.0)
    assert k.handle(TurnSubmitted("s3", "t5", tenant_id="A"), 1.0)[0] == AcceptTurn("t5")


def test_at_its_cap_a_tenants_turn_that_would_replace_its_sessions_turn_is_refused_too() -> None:
    k = make()
    k.handle(TenantConfigured("A", max_concurrent_turns=1), 0.0)
    k.handle(TurnSubmitted("s1", "t1", tenant_id="A"), 0.0)
    assert k.handle(TurnSubmitted("s1", "t2", tenant_id="A"), 0.0) == [RejectTurn("t2", 1, "tenant_concurrent_turns")]
    assert k.active_turn("s1") == "t1"  # the running turn goes on unharmed


def test_the_servers_gate_answers_first_with_its_own_code() -> None:
    k = make(max_in_flight_turns=1)
    k.handle(TenantConfigured("A", max_concurrent_turns=1), 0.0)
    k.handle(TurnSubmitted("s1", "t1", tenant_id="A"), 0.0)
    assert k.handle(TurnSubmitted("s2", "t2", tenant_id="A"), 0.0) == [RejectTurn("t2", 1, "overloaded")]


def test_a_cancelled_deleted_or_ended_turn_frees_its_tenants_slot() -> None:
    k = make()
    k.handle(TenantConfigured("A", max_concurrent_turns=1), 0.0)
    k.handle(TurnSubmitted("s1", "t1", tenant_id="A"), 0.0)
    k.handle(CancelRequested("s1"), 0.0)
    assert k.tenant_usage("A").turns_in_flight == 0
    assert k.handle(TurnSubmitted("s2", "t2", tenant_id="A"), 0.0)[0] == AcceptTurn("t2")
    k.handle(SessionClosed("s2"), 0.0)
    assert k.handle(TurnSubmitted("s3", "t3", tenant_id="A"), 0.0)[0] == AcceptTurn("t3")
    for turn in ["t1", "t2", "t3"]:
        k.handle(TurnEnded(turn), 0.0)
    assert k.tenant_usage("A").turns_in_flight == 0 and k.tenant_usage("A").permits_held == 0


def test_every_tenants_default_caps_come_from_the_limits_and_a_configuration_overrides_them() -> None:
    k = make(tenant_defaults=TenantShare(max_concurrent_turns=1))
    k.handle(TurnSubmitted("s1", "t1", tenant_id="A"), 0.0)
    assert k.handle(TurnSubmitted("s2", "t2", tenant_id="A"), 0.0)[0] == RejectTurn("t2", 1, "tenant_concurrent_turns")
    k.handle(TenantConfigured("A", max_concurrent_turns=0), 0.0)  # no cap for A
    assert k.handle(TurnSubmitted("s3", "t3", tenant_id="A"), 0.0)[0] == AcceptTurn("t3")


def test_over_its_active_runs_a_tenants_run_is_refused_and_others_are_not() -> None:
    k = make(retry_after_s=3)
    k.handle(TenantConfigured("A", max_active_runs=1), 0.0)
    assert k.handle(RunSubmitted("r1", tenant_id="A"), 0.0) == [AcceptRun("r1"), StartRun("r1")]
    assert k.handle(RunSubmitted("r2", tenant_id="A"), 0.0) == [RejectRun("r2", 3, "tenant_active_runs")]
    assert k.run_state("r2") is None and k.statistics().runs_rejected_total == 1
    assert k.handle(RunSubmitted("r3", tenant_id="B"), 0.0)[0] == AcceptRun("r3")
    assert k.tenant_usage("A").active_runs == 1 and k.tenant_usage("B").active_runs == 1


def test_a_child_of_a_working_run_passes_its_tenants_cap_and_a_waiting_run_frees_a_slot() -> None:
    k = make()
    k.handle(TenantConfigured("A", max_active_runs=1), 0.0)
    k.handle(RunSubmitted("r1", tenant_id="A"), 0.0)
    assert k.handle(RunSubmitted("r1.1", parent_run_id="r1", tenant_id="A"), 0.0)[0] == AcceptRun("r1.1")
    assert k.tenant_usage("A").active_runs == 2
    k.handle(RunEnded("r1.1", "completed"), 0.0)
    k.handle(HumanRequested("r1", "r1:1", 1, None, deadline_s=100.0, tenant_id="A"), 0.0)
    assert k.tenant_usage("A").active_runs == 0
    assert k.handle(RunSubmitted("r2", tenant_id="A"), 0.0)[0] == AcceptRun("r2")
    k.handle(RunResumed("r1", tenant_id="A"), 0.0)  # never refused, counted all the same
    assert k.tenant_usage("A").active_runs == 2
    k.handle(RunEnded("r1", "completed"), 0.0)
    k.handle(RunEnded("r2", "failed"), 0.0)
    assert k.tenant_usage("A").active_runs == 0


def test_a_run_recovered_waiting_counts_for_its_tenant_once_resumed() -> None:
    k = make()
    k.handle(HumanRequested("r1", "r1:1", 1, None, deadline_s=100.0, tenant_id="A"), 0.0)
    assert k.tenant_usage("A").active_runs == 0
    k.handle(RunResumed("r1", tenant_id="A"), 0.0)
    assert k.tenant_usage("A").active_runs == 1


def test_a_configured_weight_is_validated_and_nothing_changes() -> None:
    k = make()
    before = k.statistics()
    with pytest.raises(AssertionError):
        k.handle(TenantConfigured("A", weight=0), 0.0)
    assert k.statistics() == before


def test_a_turn_of_a_tenant_without_caps_is_granted_as_before() -> None:
    k = make()
    assert k.handle(TurnSubmitted("s1", "t1", tenant_id="A"), 0.0) == [AcceptTurn("t1"), GrantPermit("t1")]
