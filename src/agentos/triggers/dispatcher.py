"""The dispatcher: each committed delivery becomes one run, exactly once.

One background task per node claims due deliveries (a lease, so nodes sharing PostgreSQL do
not take the same ones), renders each one's input from its stored payload, and calls
`RunService.start_run(..., run_id=delivery.run_id)`. The run id was chosen when the delivery
was accepted, and a start with an id that already exists starts nothing: a crash between the
run's start and `mark_started` only means the next claim finds the run there.

A refused start is never dropped: a full server or a tenant at its `max_active_runs`
(`AdmissionRejected`), a draining one (`ShuttingDown`) or a store that does not answer leave
the delivery queued until `next_attempt_ms` (`triggers.retry_s`, growing, capped). Only what
waiting cannot fix fails it: the agent or the trigger is gone, the rendered input is refused.

A delivery refused for want of a run's place does not wait out its retry when a place frees on
this node: each run of the tenant that ends (or parks on a human) makes one of its postponed
deliveries due at once, oldest first, and wakes the dispatcher (`room_freed`; any tenant's run,
when the server as a whole was full), which claims it. Which tenants have postponed deliveries
the node knows from its own refusals and from each round's backlog, which names those postponed
by any node sharing the store: a node whose run ends hurries another node's postponed delivery
of the tenant, and starts it itself, without a message between nodes; only that node hurries,
so the nodes do not all rush for the one place. The retry is what is left for a place freed
before this node's round has seen the postponement, and for a start that loses the freed place
to another caller.

It wakes when this node accepts a delivery and when one of its postponements ends, and polls
for the rest (deliveries another node accepted): a second after a round that found work, the
wait doubling with each round that found none, up to `IDLE_POLL_MAX_S` (`waiting.IdlePoll`),
and never past the earliest time a queued delivery can be claimed, which each round reads with
the backlog (another node's postponement, a dead node's lease that runs out). Old deliveries
are pruned past `triggers.dedup_horizon_s`.
"""

from __future__ import annotations

import asyncio
import logging
from functools import cached_property

from prometheus_client import Counter

from agentos.agents.poller import RunPoller
from agentos.config.knowledge import TriggersConfig
from agentos.errors import AdmissionRejected, InvalidInput, NotFound, PayloadTooLarge, ShuttingDown
from agentos.triggers.records import DeliveryRow, TriggerRow
from agentos.triggers.storage import TriggerStorage
from agentos.triggers.template import render
from agentos.waiting import IdlePoll

log = logging.getLogger("agentos.triggers")

# A claimed delivery is this node's for this long (a start takes milliseconds). After a crash,
# the deliveries it had claimed but not started wait this long (the restarted node too). Should
# a slow round outlive it, another claim's start of the same run id fails on the run's primary key.
LEASE_MS = 10_000
POLL_S = 1.0  # at most this long between rounds without a wake-up, after a round that found work
IDLE_POLL_MAX_S = 16.0  # ... doubling with each round that found none, up to this
PRUNE_EVERY_S = 60.0
MAX_RETRY_S = 10.0  # the longest wait of a refused start (unless triggers.retry_s is longer)
_GROWTH = 1.5


class TriggerMetrics:
    """The counters; unregistered until `TriggerService.register_metrics`."""

    def __init__(self) -> None:
        self.deliveries = Counter(
            "agentos_trigger_deliveries", "Trigger deliveries by outcome", ["outcome"], registry=None
        )
        self.started = Counter("agentos_trigger_runs_started", "Runs started by trigger deliveries", registry=None)
        self.postponed = Counter(
            "agentos_trigger_runs_postponed", "Run starts refused for now (quota, overload); retried", registry=None
        )
        self.failed = Counter("agentos_trigger_runs_failed", "Deliveries whose run cannot start", registry=None)


def retry_delay_s(config: TriggersConfig, attempts: int) -> float:
    """How long a delivery refused on its `attempts`-th try waits: `retry_s`, growing, capped."""
    cap = max(config.retry_s, MAX_RETRY_S)
    return float(min(cap, config.retry_s * _GROWTH ** min(max(attempts - 1, 0), 32)))


class WaitingForRoom:
    """Who waits for a run's place on this node: the tenants whose deliveries were postponed at
    their `max_active_runs` (`ANY_TENANT`: at the server's), and the places freed for each since
    the dispatcher last looked. Plain bookkeeping: the dispatcher acts on it."""

    ANY_TENANT = None

    def __init__(self) -> None:
        self._waiting: set[str | None] = set()
        self._freed: dict[str | None, int] = {}

    def refused(self, tenant_id: str | None) -> None:
        """A delivery of `tenant_id` (`ANY_TENANT`: the server was full) was postponed."""
        self._waiting.add(tenant_id)

    def freed(self, tenant_id: str, runs: int) -> bool:
        """`runs` places of the tenant freed; whether a postponed delivery may take them."""
        takers = [key for key in (tenant_id, self.ANY_TENANT) if key in self._waiting]
        for key in takers:
            self._freed[key] = self._freed.get(key, 0) + runs
        return bool(takers)

    def take(self) -> dict[str | None, int]:
        """The places freed since the last call, by whom they are for."""
        freed, self._freed = self._freed, {}
        return freed

    def none_left(self, tenant_id: str | None) -> None:
        """No delivery of `tenant_id` waits any more: its places go unheeded until the next refusal."""
        self._waiting.discard(tenant_id)


class Dispatcher(RunPoller[TriggerStorage, TriggersConfig, TriggerMetrics]):
    """Rounds as the module says; `reclaim` takes the previous process's leases back at once
    instead of waiting `LEASE_MS` for them to expire."""

    task_name = "trigger-dispatcher"
    logger = log

    backlog = 0  # queued deliveries, every tenant's, as of the last round (the gauge)
    _next_prune = 0.0  # the loop's time of the next prune: the first round prunes

    @cached_property
    def _poll(self) -> IdlePoll:
        return IdlePoll(min(POLL_S, self._config.retry_s), IDLE_POLL_MAX_S)

    @cached_property
    def _room(self) -> WaitingForRoom:
        return WaitingForRoom()

    def wake(self) -> None:
        self._poll.reset()
        super().wake()

    def room_freed(self, tenant_id: str, runs: int) -> None:
        """`runs` of the tenant's runs stopped counting on this node (`RunService.when_runs_free`):
        if a postponed delivery waits for the place, the next round, at once, makes it due."""
        if self._room.freed(tenant_id, runs):
            self.wake()

    def wait_s(self, found: int) -> float | None:
        if found >= self._config.dispatch_batch:
            return None  # more are due
        self._poll.found(found > 0)
        return self._poll.wait_s(self._now_ms())

    async def _work(self) -> int:
        claimed = await self.round()
        now = asyncio.get_running_loop().time()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_S
            await self.prune()
        return claimed

    async def round(self) -> int:
        """Claim due deliveries and start their runs; how many were claimed."""
        now = self._now_ms()
        await self._hurry(now)
        # Reclaiming: as if every lease had expired (a lease ends before now + LEASE_MS).
        claim_now = now + LEASE_MS + 1 if self._reclaim else now
        claimed = await self._storage.claim(self._owner, claim_now, LEASE_MS, self._config.dispatch_batch)
        if len(claimed) < self._config.dispatch_batch:
            self._reclaim = False  # every lease of the previous process is taken back
        if claimed:
            triggers = await self._triggers_of(claimed)
            # at once: their journal writes share commits
            outcomes = await asyncio.gather(
                *(self._dispatch(d, triggers.get(d.trigger_id)) for d in claimed), return_exceptions=True
            )
            for outcome in outcomes:  # a mark that failed: the lease expires, the next claim marks it
                if isinstance(outcome, Exception):
                    log.warning("a trigger delivery's outcome was not recorded: %r", outcome)
        backlog = await self._storage.backlog()
        self.backlog = backlog.queued
        self._poll.seen_due(backlog.next_due_ms)  # a dead node's lease ends then, say
        for tenant_id in backlog.postponed_tenants:  # postponed here or on another node (PostgreSQL)
            self._room.refused(tenant_id)
        return len(claimed)

    async def _hurry(self, now_ms: int) -> None:
        """Make as many postponed deliveries due as places freed for them since the last round."""
        for tenant_id, runs in self._room.take().items():
            if not await self._storage.hurry(tenant_id, now_ms, runs):
                self._room.none_left(tenant_id)

    async def _triggers_of(self, deliveries: list[DeliveryRow]) -> dict[str, TriggerRow]:
        found: dict[str, TriggerRow] = {}
        for delivery in deliveries:
            if delivery.trigger_id not in found:
                trigger = await self._storage.get_trigger(delivery.tenant_id, delivery.trigger_id)
                if trigger is not None:
                    found[delivery.trigger_id] = trigger
        return found

    async def _dispatch(self, delivery: DeliveryRow, trigger: TriggerRow | None) -> None:
        if trigger is None:
            await self._fail(delivery, "trigger_deleted")
            return
        if not self._tenant_enabled(delivery.tenant_id):
            await self._fail(delivery, "tenant_disabled")
            return
        try:
            text = render(trigger.input_template, delivery.payload)
            await self._runs.start_run(delivery.tenant_id, trigger.agent, text, run_id=delivery.run_id)
        except AdmissionRejected as exc:  # no place for the run now: a freed one makes it due
            self._room.refused(delivery.tenant_id if exc.code == "tenant_active_runs" else WaitingForRoom.ANY_TENANT)
            await self._postpone(delivery)
        except ShuttingDown:
            await self._postpone(delivery)
        except NotFound:
            await self._agent_gone(delivery)
        except (InvalidInput, PayloadTooLarge) as exc:
            await self._fail(delivery, exc.code)
        except Exception:  # the store is away, or a bug: waiting may help; never dropped
            log.exception("starting the run of trigger %s delivery failed; retried", delivery.trigger_id)
            await self._postpone(delivery)
        else:
            await self._storage.mark_started(self._owner, delivery.trigger_id, delivery.webhook_id, self._now_ms())
            self._metrics.started.inc()

    async def _agent_gone(self, delivery: DeliveryRow) -> None:
        """The agent is gone; but if the run exists (started before a crash, the agent deleted
        since), the delivery did start it."""
        try:
            await self._runs.get_run(delivery.tenant_id, delivery.run_id)
        except NotFound:
            await self._fail(delivery, "agent_not_found")
            return
        await self._storage.mark_started(self._owner, delivery.trigger_id, delivery.webhook_id, self._now_ms())

    async def _postpone(self, delivery: DeliveryRow) -> None:
        due_ms = self._now_ms() + int(retry_delay_s(self._config, delivery.attempts) * 1000)
        await self._storage.postpone(self._owner, delivery.trigger_id, delivery.webhook_id, due_ms)
        self._poll.due_at(due_ms)  # looked at again then, however long the idle wait has grown
        self._metrics.postponed.inc()

    async def _fail(self, delivery: DeliveryRow, reason: str) -> None:
        log.warning("trigger %s delivery failed: %s", delivery.trigger_id, reason)
        await self._storage.mark_failed(self._owner, delivery.trigger_id, delivery.webhook_id, reason, self._now_ms())
        self._metrics.failed.inc()

    async def prune(self) -> None:
        """Delete the deliveries past `triggers.dedup_horizon_s` (a webhook-id seen before then is new again)."""
        pruned = await self._storage.prune(self._now_ms() - self._config.dedup_horizon_s * 1000)
        if pruned:
            log.info("pruned %d trigger deliveries past the dedup horizon", pruned)
