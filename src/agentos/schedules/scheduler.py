"""The scheduler: each due slot of a schedule becomes one run, exactly once, on one node.

A round, on every node alike: (1) each due schedule's slots are decided (`slots.plan`: fire or
missed) and each slot to fire is decided again against the schedule's runs still in flight
(`admit`: start, wait in the queue, or skip); the cursor moves and the fires are inserted, one
transaction, under the unique key (schedule_id, slot_ms) (`ScheduleStorage.advance`): the node
whose compare-and-set wins owns those fires, the others write nothing. (2) The fires it owns,
and pending fires whose lease ran out (a node died before starting them) or was released (a
queued fire, a refused start), are started through `RunService.start_run(..., run_id=fire.run_id)`:
the run id was chosen with the fire, and a start of an id that exists starts nothing, so a
fire tried again after a crash never makes a second run. The run counts against the tenant's
quotas like any run (`max_active_runs`: a refused start leaves the fire pending for a later round).

Time is an input (`now_ms`): tests drive `round()` on a fake clock, with no sleeps. The loop
runs a round when the earliest schedule falls due (at most `IDLE_MAX_S` later: another node's new
schedule), at once when a schedule is created or resumed on this node, and while fires wait to
start, every `schedules.poll_s`, doubling while rounds start none of them up to `BUSY_MAX_S`:
a tenant at its `max_active_runs` for an hour is asked a few times a minute, not four times a
second. A run of a tenant whose fires wait that ends (or parks on a human) on this node wakes
the scheduler at once (`room_freed`, told by `RunService.when_runs_free`); one that ends on
another node is seen within `BUSY_MAX_S`; a fire another node holds is looked at as its lease
ends (a dead node's fires). A server with no schedule costs a look every 16 s.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from agentos.agents.poller import RunPoller
from agentos.config.knowledge import SchedulesConfig
from agentos.errors import AdmissionRejected, InvalidInput, NotFound, PayloadTooLarge, ShuttingDown, StoreUnavailable
from agentos.ids import new_run_id
from agentos.kernel import RUN_TERMINAL_STATUSES
from agentos.schedules.records import FireRow, FireStatus, NextWork, Overlap, ScheduleRow
from agentos.schedules.slots import load_zone, plan
from agentos.schedules.storage import FIRE_LEASE_MS, ScheduleStorage

log = logging.getLogger("agentos.schedules")

BATCH = 64  # schedules decided, and fires claimed, per round
IDLE_MAX_S = 16.0  # with no fire waiting to start, the longest wait (a schedule another node created)
BUSY_MAX_S = 2.0  # with fires waiting that no round could start, the longest wait (a place freed on another node)
PRUNE_EVERY_ROUNDS = 240  # a minute at the default poll while fires start; longer while they wait (BUSY_MAX_S)


class ScheduleMetrics:
    """The counter; unregistered until `ScheduleService.register_metrics`."""

    def __init__(self) -> None:
        self.fires = Counter("agentos_schedule_fires", "Schedule slots by outcome", ["outcome"], registry=None)


def admit(overlap: Overlap, max_in_flight: int, max_queued: int, running: int, waiting: int) -> tuple[FireStatus, str]:
    """What a slot to fire does, given the schedule's runs `running` and its fires `waiting` to
    start: ("pending", "") to start (now or, queued, once a run ends), or ("skipped", why)."""
    if running + waiting < max_in_flight:
        return "pending", ""
    if overlap == "skip":
        return "skipped", "overlap"
    if waiting >= max_queued:
        return "skipped", "queue_full"
    return "pending", ""


class Scheduler(RunPoller[ScheduleStorage, SchedulesConfig, ScheduleMetrics]):
    """Rounds as the module says: when a slot falls due, while fires wait (a look that grows while none
    can start), and at once when woken (a schedule created or resumed, a waiting tenant's place freed)."""

    task_name = "scheduler"
    logger = log
    _rounds = 0  # rounds run, counted from 0 by each instance (pruning every PRUNE_EVERY_ROUNDS)

    _next_wait_s: float | None = None  # what the last round learned; None: it failed, poll
    _stalled_rounds = 0  # rounds in a row that left fires waiting and started none
    # The tenants whose fires the last round left waiting for a place (None: the server was full).
    _waiting: frozenset[str | None] = frozenset()

    def wake(self) -> None:
        self._stalled_rounds = 0
        super().wake()

    def room_freed(self, tenant_id: str, runs: int) -> None:
        """`runs` of the tenant's runs stopped counting on this node (`RunService.when_runs_free`):
        if a fire of the tenant waits for a place (or any fire, the server full), a round at once."""
        if tenant_id in self._waiting or None in self._waiting:
            self.wake()

    def wait_s(self, found: int) -> float:
        # A slot falls due by the clock: work found says nothing of the next; the round read when.
        wait_s = self._next_wait_s
        self._next_wait_s = None
        return self._config.poll_s if wait_s is None else wait_s

    def idle_wait_s(self, work: NextWork, now_ms: int) -> float:
        """How long the scheduler may sleep: while fires wait to start, `poll_s`, doubled for each
        round in a row that started none, up to `BUSY_MAX_S`, and no later than another owner's
        lease on one of them ends (a dead node's fires are taken then); else until the earliest
        cursor, between `poll_s` and `IDLE_MAX_S`."""
        poll_s = self._config.poll_s
        cap_s = max(poll_s, BUSY_MAX_S if work.busy else IDLE_MAX_S)
        if work.busy:
            cap_s = min(cap_s, poll_s * 2 ** min(max(self._stalled_rounds - 1, 0), 16))
        due = [at for at in (work.earliest_ms, work.lease_end_ms) if at is not None]
        if not due:
            return cap_s
        return min(max(poll_s, (min(due) - now_ms) / 1000), cap_s)

    async def round(self) -> int:
        """Decide the due slots, then start the fires this node holds; how many fires started."""
        now = self._now_ms()
        owned: list[FireRow] = []
        for schedule in await self._storage.due(now, BATCH):
            try:
                owned += await self._decide(schedule, now)
            except StoreUnavailable:
                raise
            except Exception:  # a bug about this one schedule: the others still fire
                log.exception("deciding the slots of schedule %s failed", schedule.schedule_id)
        claim_now = now + FIRE_LEASE_MS + 1 if self._reclaim else now  # as if every lease had run out
        self._reclaim = False
        owned += await self._storage.claim(self._owner, claim_now, FIRE_LEASE_MS, BATCH)
        started = 0
        full: set[str | None] = set()  # no place for their runs this round (None: for anyone's)
        waiting: set[str | None] = set()  # the tenants of the fires left pending
        for fire in sorted(owned, key=lambda f: f.slot_ms):
            if fire.tenant_id in full or None in full:  # refused just now: not asked again this round
                await self._postpone(fire)
                waiting.add(fire.tenant_id)
                continue
            if await self._start(fire, full):
                started += 1
            else:
                waiting.add(fire.tenant_id)
        self._waiting = frozenset(waiting | full)
        self._rounds += 1
        if self._rounds % PRUNE_EVERY_ROUNDS == 0:
            await self._storage.prune(self._config.fire_history)
        ended_ms = self._now_ms()
        work = await self._storage.next_work(ended_ms)
        self._stalled_rounds = self._stalled_rounds + 1 if work.busy and not started else 0
        self._next_wait_s = self.idle_wait_s(work, ended_ms)
        return started

    async def _decide(self, schedule: ScheduleRow, now: int) -> list[FireRow]:
        """Move the schedule's cursor past `now`, deciding each slot; the pending fires, if this node won."""
        await load_zone(schedule.zone)  # read once per process, off the loop
        decided = plan(
            schedule.timing,
            schedule.cursor_ms,
            now,
            grace_ms=int(self._config.misfire_grace_s * 1000),
            misfire=schedule.misfire,
        )
        running, queued = await self._in_flight(schedule)
        waiting = len(queued)
        fires: list[FireRow] = []
        # a disabled tenant's slots pass by unfired (and unrecorded): no failed row every second
        for slot in decided.fire if self._tenant_enabled(schedule.tenant_id) else ():
            status, reason = admit(
                schedule.overlap, schedule.max_runs_in_flight, self._config.max_queued, running, waiting
            )
            waiting += status == "pending"
            row = FireRow(schedule.schedule_id, slot, schedule.tenant_id, new_run_id(), status, now, reason or None)
            fires.append(row)
        if not await self._storage.advance(schedule, decided.cursor_ms, fires, self._owner):
            return []  # another node decided these slots
        if decided.missed:
            self._metrics.fires.labels(outcome="missed").inc(decided.missed)
        for fire in fires:
            if fire.status == "skipped":
                self._metrics.fires.labels(outcome="skipped").inc()
        return [f for f in fires if f.status == "pending"]

    async def _in_flight(self, schedule: ScheduleRow) -> tuple[int, list[int]]:
        """The schedule's runs still running, and the slots of its fires waiting to start (oldest
        first); the started fires whose run has ended are settled on the way."""
        running, waiting = 0, []
        for fire in await self._storage.active(schedule.schedule_id):
            if fire.status == "pending":
                waiting.append(fire.slot_ms)
            elif await self._run_ended(fire):
                await self._storage.settle(fire, "finished", None, self._now_ms())
            else:
                running += 1
        return running, waiting

    async def _run_ended(self, fire: FireRow) -> bool:
        try:
            run = await self._runs.get_run(fire.tenant_id, fire.run_id)
        except NotFound:
            # deleted with its session or its tenant; or, just started on another node, not
            # journaled yet: only a fire started a lease ago is taken for ended
            return self._now_ms() - fire.updated_ms > FIRE_LEASE_MS
        return run.get("status") in RUN_TERMINAL_STATUSES

    async def _start(self, fire: FireRow, full: set[str | None]) -> int:
        """Start the fire's run, or leave it pending (no room yet, refused for now), or fail it.
        A start refused for want of a place adds its tenant to `full` (None: the server is full)."""
        schedule = await self._storage.get(fire.tenant_id, fire.schedule_id)
        if schedule is None:  # deleted meanwhile (its fires went with it)
            return 0
        if not self._tenant_enabled(fire.tenant_id):
            await self._settle(fire, "failed", "tenant_disabled")
            return 0
        running, waiting = await self._in_flight(schedule)
        # Only the oldest waiting fires that fit start: two nodes holding two of them at once
        # cannot both take the one free place (each starts only a fire in the first places).
        if schedule.paused or fire.slot_ms not in waiting[: max(schedule.max_runs_in_flight - running, 0)]:
            await self._storage.release(fire, self._owner)  # queued: a later round starts it
            return 0
        try:
            await self._runs.start_run(
                fire.tenant_id, schedule.agent, schedule.input, run_id=fire.run_id, owner=schedule.owner
            )
        except AdmissionRejected as exc:  # the tenant at its quota (or the server full): no place this round
            full.add(None if exc.code == "overloaded" else fire.tenant_id)
            return await self._postpone(fire)
        except (ShuttingDown, StoreUnavailable):  # a draining node, the store away
            return await self._postpone(fire)
        except NotFound:
            await self._settle(fire, "failed", "agent_not_found")
            return 0
        except (InvalidInput, PayloadTooLarge) as exc:
            await self._settle(fire, "failed", exc.code)
            return 0
        except Exception:  # a bug, or a store error: waiting may help; never dropped, never doubled (its run id)
            log.exception("starting the run of schedule %s slot %d failed; tried again", fire.schedule_id, fire.slot_ms)
            await self._storage.release(fire, self._owner)
            return 0
        await self._settle(fire, "started", None)
        return 1

    async def _postpone(self, fire: FireRow) -> int:
        """Leave the fire pending for a later round (its lease released): no run started."""
        await self._storage.release(fire, self._owner)
        self._metrics.fires.labels(outcome="postponed").inc()
        return 0

    async def _settle(self, fire: FireRow, status: FireStatus, reason: str | None) -> None:
        await self._storage.settle(fire, status, self._owner, self._now_ms(), reason)
        self._metrics.fires.labels(outcome=status).inc()
