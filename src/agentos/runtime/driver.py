"""The driver: the one caller of `Kernel.handle`, and the one timer.

Chat turns and agent runs are both kernel citizens: whoever has something to tell the kernel
(a turn submitted, a run parked on a human, a stream closed) calls `Driver.handle(event)`.
The kernel is synchronous, so each call is atomic on the event loop and needs no lock. The
commands it returns go to the executor registered for their type (`Driver.on`): the turn
runtime executes turn commands, the run service run commands. Registering instead of
importing keeps the driver below both and lets them be built in order.

Provider permits are the one command the driver executes itself: a turn's or a run's model
call waits on a future here (`acquire_permit`), resolved by `GrantPermit` or failed by the
kernel's `FailTurn` (the permit wait ran out).

In a cluster (`coordination.redis_url`), a stream also needs a slot of the cluster's limit
(`agentos.coordination.permits`), taken after the kernel's permit and given back with it: on
`ProviderReleased` or `TurnEnded`, whichever comes first (`open_stream`, `handle`). A tenant's
`max_concurrent_turns` is counted there too (`hold_turn`, given back on `TurnEnded`): the
kernel's count is this node's only, and a cap kept per node multiplies by the nodes. So is
`max_active_runs` (`hold_run`; a run's place then follows the kernel's count, `_sync_run_hold`).

Tenants: the kernel shares the permits among tenants by weight and caps each one's turns and
runs (`agentos.kernel.permits`, `tenants`); `configure_tenant` tells it a tenant's limits. Who
waits for a run's place (the trigger dispatcher's postponed deliveries) hears when one frees
(`when_runs_free`) instead of polling for it.

One real timer is armed for `kernel.next_deadline()`; when it fires the driver feeds `Tick`.
Tests with a `FakeClock` call `tick()` themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentos.clock import Clock
from agentos.config.tenants import TenantLimits
from agentos.errors import ProviderLimitTimeout
from agentos.kernel import (
    DEFAULT_TENANT,
    Command,
    Event,
    FailTurn,
    GrantPermit,
    HumanAnswered,
    HumanRequested,
    Kernel,
    ProviderReleased,
    RunCancelRequested,
    RunEnded,
    RunResumed,
    RunState,
    RunSubmitted,
    StreamRequested,
    TenantConfigured,
    Tick,
    TurnEnded,
)

if TYPE_CHECKING:
    from agentos.coordination.holds import ClusterHolds
    from agentos.coordination.permits import ClusterPermits

C = TypeVar("C")
# The events that change whether a run is counted (has a task): its place in Redis follows.
_RUN_EVENTS = (RunSubmitted, RunResumed, HumanRequested, HumanAnswered, RunCancelRequested, RunEnded)
_COUNTED = (RunState.RUNNING, RunState.STOPPING, RunState.TERMINATING)
# The events after which a tenant may count fewer runs: a run (and the children it takes along) ends, or parks.
_FREEING = (RunEnded, HumanRequested)
RoomListener = Callable[[str, int], None]


class Driver:
    def __init__(
        self,
        kernel: Kernel,
        clock: Clock,
        cluster: ClusterPermits | None = None,
        *,
        turn_holds: ClusterHolds | None = None,
        run_holds: ClusterHolds | None = None,
        user_turn_holds: ClusterHolds | None = None,
    ) -> None:
        self.kernel = kernel
        self.clock = clock
        self.cluster = cluster  # the cluster's provider slots, when nodes share the limit
        self.turn_holds = turn_holds  # tenants' `max_concurrent_turns`, cluster-wide
        self.run_holds = run_holds  # tenants' `max_active_runs`, cluster-wide
        self.user_turn_holds = user_turn_holds  # end users' `user_max_concurrent_turns`, cluster-wide
        self._executors: dict[type[Any], Callable[[Any], None]] = {}
        self._permits: dict[str, asyncio.Future[None]] = {}  # model calls waiting for a permit
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._closed = False
        self._room_listeners: list[RoomListener] = []

    def on(self, kind: type[C], execute: Callable[[C], None]) -> None:
        """Carry out every command of type `kind` with `execute` (synchronous: it may start
        tasks or resolve futures, never await)."""
        assert kind not in self._executors, f"two executors for {kind.__name__}"
        self._executors[kind] = execute

    def when_runs_free(self, listener: RoomListener) -> Callable[[], None]:
        """Call `listener(tenant_id, runs)` each time `runs` of the tenant's runs stop counting
        against `max_active_runs` on this node (they ended, or one parked on a human), once the
        kernel let go of them (in a cluster, Redis's count is told in the background, so a start
        at once may still be refused there); returns the function that stops it (once or more:
        a service closed twice). It runs on the event loop, inside `handle`: it must not block or raise."""
        self._room_listeners.append(listener)

        def stop() -> None:
            if listener in self._room_listeners:
                self._room_listeners.remove(listener)

        return stop

    def handle(self, event: Event) -> list[Command]:
        """Feed one event to the kernel and carry out what it answers."""
        if self.cluster is not None and isinstance(event, ProviderReleased | TurnEnded):
            self.cluster.release(event.turn_id)  # a no-op for a stream without a slot
        if isinstance(event, TurnEnded):
            self.release_turn(event.turn_id)
        counting = self._counting(event)
        commands = self.kernel.handle(event, self.clock.now())
        if self.run_holds is not None and isinstance(event, _RUN_EVENTS):
            self._sync_run_hold(event.run_id)
        for command in commands:
            self._execute(command)
        self._arm_timer()
        if counting is not None:
            self._tell_freed(*counting)
        return commands

    def tick(self) -> None:
        """Fire the kernel's due deadlines (the timer calls this; tests with a FakeClock too)."""
        self.handle(Tick())

    def configure_tenant(self, tenant_id: str, limits: TenantLimits) -> None:
        """Give the kernel a tenant's weight and caps (from its row, or the defaults); the next
        grant and admission use them. Unknown tenants have `settings.tenant_limits`."""
        configured = TenantConfigured(tenant_id, limits.weight, limits.max_concurrent_turns, limits.max_active_runs)
        self.handle(configured)

    async def hold_turn(self, turn_id: str, tenant_id: str) -> bool:
        """In a cluster, whether the tenant's `max_concurrent_turns` leaves room for one more turn
        over every node (`agentos.coordination.holds`); the place is given back on `TurnEnded`.
        True at no cost without a cluster or without the cap: the kernel's count decides then."""
        cap = self.kernel.tenant_share(tenant_id).max_concurrent_turns
        if self.turn_holds is None or not cap:
            return True
        return await self.turn_holds.acquire(turn_id, tenant_id, cap)

    async def hold_user_turn(self, turn_id: str, tenant_id: str, owner: str | None, cap: int) -> bool:
        """`hold_turn` for the turn's end user (the session's owner) and their
        `user_max_concurrent_turns` (`cap`) over every node. True at no cost without a cluster,
        a user or the cap: the runtime's count on this node decides then."""
        if self.user_turn_holds is None or owner is None or not cap:
            return True
        return await self.user_turn_holds.acquire(turn_id, f"{tenant_id}:{owner}", cap)  # ':' is in no tenant id

    def release_turn(self, turn_id: str) -> None:
        """Give back the turn's places in the cluster (a no-op for one without: not held, or no cluster)."""
        for holds in (self.turn_holds, self.user_turn_holds):
            if holds is not None:
                holds.release(turn_id)

    async def hold_run(self, run_id: str, tenant_id: str, parent_run_id: str | None) -> bool:
        """`hold_turn` for a plain run and the tenant's `max_active_runs`. A child of a working
        parent is never refused (the kernel's rule): it is counted after its admission."""
        cap = self.kernel.tenant_share(tenant_id).max_active_runs
        if self.run_holds is None or not cap:
            return True
        if parent_run_id is not None and self.kernel.run_state(parent_run_id) not in (None, RunState.WAITING):
            return True
        return await self.run_holds.acquire(run_id, tenant_id, cap)

    def _sync_run_hold(self, run_id: str) -> None:
        """Keep the run's place in Redis as the kernel counts it: held while it has a task (a
        resumed or answered run too, never refused), given back when it parks or ends."""
        assert self.run_holds is not None
        if self.kernel.run_state(run_id) not in _COUNTED:
            self.run_holds.release(run_id)  # a no-op for a run without a place
            return
        tenant = self.kernel.run_tenant(run_id)
        if tenant is not None and self.kernel.tenant_share(tenant).max_active_runs:
            self.run_holds.add(run_id, tenant)  # a no-op for one that holds its place

    def _counting(self, event: Event) -> tuple[str, int] | None:
        """Before an event that may free runs' places, with someone listening: the run's tenant
        and how many runs it counts now."""
        if not self._room_listeners or not isinstance(event, _FREEING):
            return None
        tenant = self.kernel.run_tenant(event.run_id)
        return None if tenant is None else (tenant, self.kernel.tenant_usage(tenant).active_runs)

    def _tell_freed(self, tenant: str, counted: int) -> None:
        freed = counted - self.kernel.tenant_usage(tenant).active_runs
        if freed > 0:
            for listener in list(self._room_listeners):
                listener(tenant, freed)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- provider permits --------------------------------------------------------------------

    def waits_for_permit(self, stream_id: str) -> asyncio.Future[None]:
        """Register a wait for `stream_id`'s permit, when the kernel did not grant it at once."""
        future = asyncio.get_running_loop().create_future()
        self._permits[stream_id] = future
        return future

    async def wait_permit(self, stream_id: str, future: asyncio.Future[None]) -> None:
        """Wait for the permit `future` of `stream_id`.

        Raises:
            ProviderLimitTimeout: no permit within `kernel.permit_wait_timeout_s`.
        """
        try:
            await future
        finally:
            self._permits.pop(stream_id, None)

    async def acquire_permit(self, stream_id: str, owner: str | None = None, tenant_id: str = DEFAULT_TENANT) -> None:
        """Take a provider permit for a stream outside any chat turn (a run's model call), from
        `tenant_id`'s fair share.

        Raises:
            ProviderLimitTimeout: no permit within `kernel.permit_wait_timeout_s`.
        """
        since_s = self.clock.now()
        commands = self.handle(StreamRequested(stream_id, owner, tenant_id))
        future = None
        if GrantPermit(stream_id) not in commands:
            refused = next((c for c in commands if isinstance(c, FailTurn) and c.turn_id == stream_id), None)
            if refused is not None:  # its run is not running (stopped, parked): nothing was recorded
                raise ProviderLimitTimeout(f"no provider permit: {refused.reason}")
            future = self.waits_for_permit(stream_id)
        try:
            await self.open_stream(stream_id, future, tenant_id, since_s)
        except BaseException:
            self.handle(TurnEnded(stream_id))
            raise

    async def open_stream(
        self, stream_id: str, future: asyncio.Future[None] | None, tenant_id: str, since_s: float
    ) -> None:
        """What a stream needs before it opens upstream: the kernel's permit (`future`, when it
        was not granted at once), then in a cluster a slot of the cluster's limit; both within
        `kernel.permit_wait_timeout_s` from `since_s` (when the stream was asked for).

        Raises:
            ProviderLimitTimeout: not both in time.
        """
        if future is not None:
            await self.wait_permit(stream_id, future)
        if self.cluster is not None:
            left_s = since_s + self.kernel.limits.permit_wait_timeout_s - self.clock.now()
            await self.cluster.acquire(stream_id, tenant_id, left_s, shared=self.kernel.statistics().shared)

    def release_permit(self, stream_id: str) -> None:
        self.handle(TurnEnded(stream_id))

    # -- internals ---------------------------------------------------------------------------

    def _execute(self, command: Command) -> None:
        match command:
            case GrantPermit(stream_id):
                future = self._permits.get(stream_id)
                if future is not None and not future.done():
                    future.set_result(None)
            case FailTurn(stream_id, reason) if stream_id in self._permits:
                future = self._permits[stream_id]
                if not future.done():
                    message = "no provider permit in time" if reason == "provider_limit_timeout" else reason
                    future.set_exception(ProviderLimitTimeout(message))
                return  # a stream still waiting: its waiter ends it
        execute = self._executors.get(type(command))
        if execute is not None:
            execute(command)

    def _arm_timer(self) -> None:
        deadline = self.kernel.next_deadline()
        if deadline is None or deadline >= self._timer_at or self._closed:
            return  # a timer that fires early only costs one empty Tick
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = deadline
        self._timer = loop.call_later(max(0.0, deadline - self.clock.now()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self.tick()
