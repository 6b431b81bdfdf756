"""`TurnOffered` and `RunOffered`: the gate asked before a turn or run is read in (issue 14).

An offer answers exactly what a submission of the same tenant would answer now, counts a
refusal once, and changes nothing else: no slot is held, no session touched.
"""

from __future__ import annotations

from agentos.kernel import (
    AcceptTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    RejectRun,
    RejectTurn,
    RunEnded,
    RunOffered,
    RunSubmitted,
    TenantConfigured,
    TurnEnded,
    TurnOffered,
    TurnSubmitted,
)


def test_an_offer_below_the_gate_passes_and_holds_nothing() -> None:
    k = Kernel(KernelLimits(max_in_flight_turns=1))
    assert k.handle(TurnOffered(), now=0.0) == []
    assert k.handle(TurnOffered(), now=0.0) == []  # an offer takes no slot: it can pass twice
    stats = k.statistics()
    assert (stats.in_flight_turns, stats.admitted_total, stats.rejected_total, stats.active_sessions) == (0, 0, 0, 0)
    assert k.handle(TurnSubmitted("s1", "t1"), now=0.0) == [AcceptTurn("t1"), GrantPermit("t1")]


def test_an_offer_over_the_gate_is_refused_like_a_submission_and_counted_once() -> None:
    k = Kernel(KernelLimits(max_in_flight_turns=1, retry_after_s=3))
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(TurnOffered(), now=1.0) == [RejectTurn("", 3, "overloaded")]
    assert k.statistics().rejected_total == 1
    assert k.active_turn("s1") == "t1" and k.statistics().in_flight_turns == 1
    k.handle(TurnEnded("t1"), now=2.0)
    assert k.handle(TurnOffered(), now=2.0) == []  # the slot is back
    assert k.statistics().rejected_total == 1


def test_an_offer_answers_what_a_submission_would_at_every_count() -> None:
    for limit in (1, 2, 3):
        k = Kernel(KernelLimits(max_in_flight_turns=limit))
        for n in range(limit + 2):
            offered = k.handle(TurnOffered(), now=0.0)
            submitted = k.handle(TurnSubmitted(f"s{n}", f"t{n}"), now=0.0)
            assert bool(offered) == isinstance(submitted[0], RejectTurn), (limit, n)


def test_an_offer_over_the_tenants_cap_names_the_tenant_and_spares_the_others() -> None:
    k = Kernel(KernelLimits())
    k.handle(TenantConfigured("acme", 1, 1, 0), now=0.0)
    k.handle(TurnSubmitted("s1", "t1", tenant_id="acme"), now=0.0)
    assert k.handle(TurnOffered("acme"), now=0.0) == [RejectTurn("", 1, "tenant_concurrent_turns")]
    assert k.handle(TurnOffered("other"), now=0.0) == []


def test_a_run_offer_is_refused_over_max_active_runs_and_passes_below() -> None:
    k = Kernel(KernelLimits(max_active_runs=1, retry_after_s=2))
    assert k.handle(RunOffered(), now=0.0) == []
    k.handle(RunSubmitted("r1", None), now=0.0)
    assert k.handle(RunOffered(), now=0.0) == [RejectRun("", 2, "overloaded")]
    stats = k.statistics()
    assert (stats.active_runs, stats.runs_admitted_total, stats.runs_rejected_total) == (1, 1, 1)
    k.handle(RunEnded("r1", "completed"), now=1.0)
    assert k.handle(RunOffered(), now=1.0) == []
