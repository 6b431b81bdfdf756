"""The scheduler's rounds on a fake clock (no sleeps, no loop task): each slot fires once, the
overlap and misfire policies, refused starts, a node that dies between claim and start."""

from __future__ import annotations

import pytest

from agentos.config import SchedulesConfig
from agentos.schedules.scheduler import BUSY_MAX_S, IDLE_MAX_S, ScheduleMetrics, Scheduler, admit
from agentos.schedules.storage import FIRE_LEASE_MS, ScheduleStorage
from agentos.testing import FakeClock
from tests.schedules.conftest import FakeRuns, schedule

S = 1000
CONFIG = SchedulesConfig(misfire_grace_s=30.0, max_queued=2)


def scheduler(storage: ScheduleStorage, runs: FakeRuns, clock: FakeClock, owner: str = "node-a") -> Scheduler:
    return Scheduler(storage, runs, CONFIG, owner, lambda: int(clock.now() * 1000), ScheduleMetrics())


async def fires(storage: ScheduleStorage, schedule_id: str) -> list[tuple[int, str, str | None]]:
    """(slot in s, status, reason), oldest first."""
    rows = await storage.fires("t1", schedule_id, 1000)
    return [(f.slot_ms // S, f.status, f.reason) for f in reversed(rows)]


def test_admit() -> None:
    assert admit("skip", 2, 5, running=1, waiting=0) == ("pending", "")
    assert admit("skip", 2, 5, running=1, waiting=1) == ("skipped", "overlap")
    assert admit("queue", 1, 2, running=1, waiting=1) == ("pending", "")
    assert admit("queue", 1, 2, running=1, waiting=2) == ("skipped", "queue_full")


async def test_each_slot_fires_once_however_many_rounds_and_nodes(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10, max_runs_in_flight=10)
    await storage.create(row, max_per_tenant=10)
    a, b = scheduler(storage, runs, clock, "node-a"), scheduler(storage, runs, clock, "node-b")
    assert await a.round() == 0  # nothing due at 0 s: the first slot is a period after creation
    clock.advance(10)
    assert await a.round() == 1
    assert await b.round() == 0 and await a.round() == 0  # the same slot, decided: nothing more
    clock.advance(25)  # 35 s: slots 20 and 30 are due
    assert await b.round() == 2
    assert await a.round() == 0
    assert await fires(storage, row.schedule_id) == [(slot, "started", None) for slot in (10, 20, 30)]
    assert len(runs.starts) == len(set(runs.starts)) == 3
    stored = await storage.get("t1", row.schedule_id)
    assert stored is not None and stored.cursor_ms == 40 * S  # from the schedule, not from the last fire


async def test_overlap_skip_skips_a_slot_while_the_previous_run_still_runs(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10, overlap="skip")
    await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    clock.advance(10)
    assert await s.round() == 1
    clock.advance(10)
    assert await s.round() == 0  # slot 20: the run of slot 10 still runs
    runs.finish_all()
    clock.advance(10)
    assert await s.round() == 1
    assert await fires(storage, row.schedule_id) == [
        (10, "finished", None),
        (20, "skipped", "overlap"),
        (30, "started", None),
    ]


async def test_overlap_queue_starts_the_waiting_slots_in_order_as_runs_end(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10, overlap="queue")
    await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    clock.advance(10)
    assert await s.round() == 1
    for _ in range(3):  # slots 20 and 30 wait (max_queued = 2); 40 finds the queue full
        clock.advance(10)
        assert await s.round() == 0
    assert [f[1:] for f in await fires(storage, row.schedule_id)] == [
        ("started", None),
        ("pending", None),
        ("pending", None),
        ("skipped", "queue_full"),
    ]
    runs.finish_all()
    assert await s.round() == 1  # slot 20 (not 30): oldest first, one at a time
    runs.finish_all()
    assert await s.round() == 1
    assert [f[:2] for f in await fires(storage, row.schedule_id)][:3] == [
        (10, "finished"),
        (20, "finished"),
        (30, "started"),
    ]
    assert len(runs.starts) == 3


async def test_misfire_after_downtime(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    skip = schedule(every_s=60, max_runs_in_flight=10, misfire="skip")
    once = schedule(every_s=60, max_runs_in_flight=10, misfire="run_once")
    for row in (skip, once):
        await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    clock.advance(10 * 60 + 45)  # down for ten slots; 45 s late for the last one (grace 30 s)
    assert await s.round() == 1
    assert await fires(storage, skip.schedule_id) == []
    assert await fires(storage, once.schedule_id) == [(600, "started", None)]  # one run for all the missed
    for row in (skip, once):
        stored = await storage.get("t1", row.schedule_id)
        assert stored is not None and stored.cursor_ms == 660 * S
    clock.advance(20)  # 11:05: slot 660 is 5 s late, within the grace: both fire
    assert await s.round() == 2


async def test_a_refused_start_waits_and_keeps_its_run_id(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10)
    await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    runs.refuse = True  # the tenant is at its max_active_runs
    clock.advance(10)
    assert await s.round() == 0
    (fire,) = await storage.fires("t1", row.schedule_id, 10)
    assert fire.status == "pending"
    runs.refuse = False
    clock.advance(1)
    assert await s.round() == 1
    assert runs.starts == [fire.run_id]


async def test_a_tenant_without_a_place_is_asked_once_a_round_not_once_a_fire(storage: ScheduleStorage) -> None:
    """Refused at its max_active_runs, a tenant's other fires wait for the next round without
    asking again (each ask costs its schedule's reads and a refused start); another tenant's
    fires are still asked."""
    clock, runs = FakeClock(0.0), FakeRuns()
    ours = [schedule(every_s=10, max_runs_in_flight=5) for _ in range(3)]
    theirs = schedule(every_s=10, tenant="t2")
    for row in (*ours, theirs):
        await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    runs.refuse = True  # every start refused: the tenants at their max_active_runs
    clock.advance(10)
    assert await s.round() == 0
    pending = [f for row in ours for f in await storage.fires("t1", row.schedule_id, 10)]
    (other,) = await storage.fires("t2", theirs.schedule_id, 10)
    assert [f.status for f in pending] == ["pending"] * 3  # none dropped
    ours_asked = [r for r in runs.refused if r in {f.run_id for f in pending}]
    assert len(ours_asked) == 1 and other.run_id in runs.refused and len(runs.refused) == 2  # t1 once, t2 once
    runs.refuse = False
    clock.advance(1)
    assert await s.round() == 4  # all start at the next round
    assert sorted(runs.starts) == sorted([*(f.run_id for f in pending), other.run_id])


async def test_a_node_that_dies_between_claim_and_start_leaves_the_fire_to_another(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10)
    await storage.create(row, max_per_tenant=10)
    dead = scheduler(storage, runs, clock, "node-dead")
    clock.advance(10)
    # the dead node's round got as far as the claim (cursor moved, fire inserted and leased to it)
    (decided,) = await dead._decide(row, int(clock.now() * 1000))
    alive = scheduler(storage, runs, clock, "node-b")
    assert await alive.round() == 0  # the lease still holds
    clock.advance(FIRE_LEASE_MS / 1000 + 1)
    assert await alive.round() >= 1
    assert runs.starts[0] == decided.run_id  # the run id chosen with the fire: started once
    assert len(runs.starts) == len(set(runs.starts))


async def test_a_paused_schedule_does_not_fire_and_resumes_from_the_next_slot(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10)
    await storage.create(row, max_per_tenant=10)
    await storage.set_paused("t1", row.schedule_id, True, row.cursor_ms)
    s = scheduler(storage, runs, clock)
    clock.advance(35)
    assert await s.round() == 0
    await storage.set_paused("t1", row.schedule_id, False, 40 * S)
    assert await s.round() == 0
    clock.advance(5)
    assert await s.round() == 1
    assert await fires(storage, row.schedule_id) == [(40, "started", None)]


async def test_an_unknown_agent_fails_the_fire(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(agent="gone")
    await storage.create(row, max_per_tenant=10)
    clock.advance(10)
    assert await scheduler(storage, runs, clock).round() == 0
    assert await fires(storage, row.schedule_id) == [(10, "failed", "agent_not_found")]


async def test_a_disabled_tenants_slots_pass_by_unfired(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10)
    await storage.create(row, max_per_tenant=10)
    s = Scheduler(
        storage,
        runs,
        CONFIG,
        "node-a",
        lambda: int(clock.now() * 1000),
        ScheduleMetrics(),
        tenant_enabled=lambda _: False,
    )
    clock.advance(25)
    assert await s.round() == 0
    assert await fires(storage, row.schedule_id) == [] and runs.starts == []
    stored = await storage.get("t1", row.schedule_id)
    assert stored is not None and stored.cursor_ms == 30 * S  # decided: not fired again once it is enabled


async def test_with_one_place_free_only_the_oldest_waiting_fire_starts(storage: ScheduleStorage) -> None:
    """Two nodes, each holding one of two queued fires when the one running run ends: only the
    holder of the oldest starts its run (both would fit if each looked only at the runs)."""
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=10, overlap="queue")
    await storage.create(row, max_per_tenant=10)
    a, b = scheduler(storage, runs, clock, "node-a"), scheduler(storage, runs, clock, "node-b")
    clock.advance(10)
    assert await a.round() == 1  # slot 10 runs
    for _ in range(2):  # 20 and 30 wait
        clock.advance(10)
        assert await a.round() == 0
    runs.finish_all()
    pending = sorted(
        (f for f in await storage.fires("t1", row.schedule_id, 10) if f.status == "pending"), key=lambda f: f.slot_ms
    )
    assert [f.slot_ms // S for f in pending] == [20, 30]
    assert await b._start(pending[1], set()) == 0  # not the oldest: left waiting
    assert await a._start(pending[0], set()) == 1
    assert await b._start(pending[1], set()) == 0  # the one place is taken now
    assert len(runs.starts) == 2


async def test_an_idle_scheduler_sleeps_until_the_earliest_slot_and_polls_while_fires_wait(
    storage: ScheduleStorage,
) -> None:
    """No schedule: one look every IDLE_MAX_S (a server with none used to look four times a
    second); a schedule: until its next slot; a fire waiting to start: every poll_s."""
    clock, runs = FakeClock(0.0), FakeRuns()
    s = scheduler(storage, runs, clock)
    await s.round()
    assert s.wait_s(0) == IDLE_MAX_S
    row = schedule(every_s=10, overlap="queue")
    await storage.create(row, max_per_tenant=10)
    clock.advance(4)
    await s.round()
    assert s.wait_s(0) == 6.0  # the first slot is at 10 s
    clock.advance(6)
    assert await s.round() == 1
    assert s.wait_s(0) == 10.0  # slot 10 started; the next is at 20 s
    clock.advance(10)
    assert await s.round() == 0  # slot 20 waits behind slot 10's run (max_runs_in_flight 1)
    assert s.wait_s(0) == CONFIG.poll_s
    assert s.wait_s(0) == CONFIG.poll_s  # a round that failed (nothing learned): poll


async def test_fires_that_no_round_can_start_are_polled_less_and_less_until_a_place_frees(
    storage: ScheduleStorage,
) -> None:
    """A tenant at its max_active_runs for long: its waiting fires are asked every poll_s,
    doubling while no round starts one, up to BUSY_MAX_S (it used to be every poll_s for as long
    as the cap held); a run of that tenant ending on this node wakes the scheduler at once, and
    one of another tenant does not."""
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=3600, overlap="queue", max_runs_in_flight=5)  # the next slot is an hour away
    await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    runs.refuse = True
    clock.advance(3600)
    waits = []
    for _ in range(6):
        assert await s.round() == 0
        waits.append(s.wait_s(0))
        clock.advance(waits[-1])
    assert waits == [CONFIG.poll_s, 0.5, 1.0, BUSY_MAX_S, BUSY_MAX_S, BUSY_MAX_S]
    s.room_freed("t2", 1)  # not the tenant whose fire waits
    assert not s.woken
    s.room_freed("t1", 1)
    assert s.woken
    runs.refuse = False
    assert await s.round() == 1  # the round the wake runs starts it
    assert s.wait_s(0) == IDLE_MAX_S  # nothing waits, the next slot an hour away


async def test_the_longer_poll_never_passes_a_slot_that_falls_due(storage: ScheduleStorage) -> None:
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=1, overlap="queue", max_runs_in_flight=5)
    await storage.create(row, max_per_tenant=10)
    s = scheduler(storage, runs, clock)
    runs.refuse = True
    clock.advance(1)
    for _ in range(5):
        assert await s.round() == 0
        assert s.wait_s(0) <= 1.0  # a slot a second: never a wait of BUSY_MAX_S past one
        clock.advance(1)


async def test_a_dead_nodes_fire_is_taken_as_its_lease_ends_not_a_grown_poll_later(storage: ScheduleStorage) -> None:
    """The survivor's rounds find the fire leased to the dead node and start nothing, so its look
    grows; it never grows past the moment that lease ends (a millisecond after), when the fire
    can be claimed."""
    clock, runs = FakeClock(0.0), FakeRuns()
    row = schedule(every_s=3600)  # no other slot for an hour
    await storage.create(row, max_per_tenant=10)
    dead = scheduler(storage, runs, clock, "node-dead")
    clock.advance(3600)
    (decided,) = await dead._decide(row, int(clock.now() * 1000))  # claimed, then the node died
    lease_end_s = 3600 + FIRE_LEASE_MS / 1000
    alive = scheduler(storage, runs, clock, "node-b")
    waits = []
    while clock.now() < lease_end_s:
        assert await alive.round() == 0  # held by the dead node
        waits.append(alive.wait_s(0))
        clock.advance(waits[-1])
    assert max(waits) == BUSY_MAX_S and clock.now() == pytest.approx(lease_end_s + 0.001)  # just as it ran out
    assert await alive.round() == 1 and runs.starts == [decided.run_id]
