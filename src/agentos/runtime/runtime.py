"""The runtime: sessions and turns around one kernel, as the HTTP layer sees them.

It is built in order (`agentos.services.open_services`): the driver and the run service
exist before it, so nothing is wired by assignment after construction. It owns the turn
side (sessions, chat turns, agent turns) and the lifecycle (the loop-lag probe, the drain).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import TYPE_CHECKING

from agentos.clock import Clock
from agentos.config import Settings
from agentos.errors import AdmissionRejected, ShuttingDown
from agentos.ids import new_id
from agentos.kernel import Kernel, KernelLimits, RejectRun, RejectTurn, RunOffered, TenantShare, TurnOffered
from agentos.metrics import Metrics
from agentos.providers.base import Provider
from agentos.runtime.agent_turn import AgentTurns
from agentos.runtime.chat import ChatTurns
from agentos.runtime.driver import Driver
from agentos.runtime.reclaim import Reclaimer
from agentos.runtime.sessions import DEFAULT_AGENT, Sessions
from agentos.runtime.streams import TurnEvent, TurnStreams
from agentos.runtime.turn import Turn, TurnSink
from agentos.runtime.turns import Turns
from agentos.store.base import Store
from agentos.store.records import SessionRecord
from agentos.telemetry import NO_TRACING, Tracing

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus
    from agentos.runtime.agent_turn import AgentRuns

__all__ = ["DEFAULT_AGENT", "Runtime", "kernel_limits", "new_id", "next_probe_in"]


LAG_PROBE_FAST_S = 0.1  # while the loop lags: fine samples of the spike
LAG_PROBE_SLOW_S = 1.0  # while it keeps up: one wake-up a second
LAG_PROBE_BUSY_MS = 1.0  # a timer this late or later means the loop has a queue


def next_probe_in(lag_ms: float) -> float:
    """When to probe the loop again, after a probe that ran `lag_ms` late.

    A probe is a wake-up of its own on a quiet loop: at 10 Hz it was half of an idle server's
    CPU (about 1.5 ms a second, 3 ms per turn at one concurrent turn). So the probe samples at
    10 Hz only while the loop lags and once a second while it keeps up: a lag spike is still
    sampled finely from its first late probe on, and a quiet loop pays one wake-up a second.
    The histogram therefore holds more samples of busy moments than of quiet ones: read it as
    "how late were timers when the loop was late", its count as no clock."""
    return LAG_PROBE_FAST_S if lag_ms >= LAG_PROBE_BUSY_MS else LAG_PROBE_SLOW_S


def kernel_limits(settings: Settings) -> KernelLimits:
    k, t = settings.kernel, settings.tenant_limits
    return KernelLimits(
        max_in_flight_turns=k.max_in_flight_turns,
        concurrency_limit=k.concurrency_limit,
        session_ttl_s=k.session_ttl_secs,
        permit_wait_timeout_s=k.permit_wait_timeout_s,
        retry_after_s=k.retry_after_s,
        max_active_runs=k.max_active_runs,
        fair_reserve=k.fair_reserve,
        max_queued_turns_per_session=k.max_queued_turns_per_session,
        tenant_defaults=TenantShare(t.weight, t.max_concurrent_turns, t.max_active_runs),
    )


class Runtime:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        provider: Provider,
        metrics: Metrics,
        *,
        driver: Driver,
        runs: AgentRuns | None = None,
        bus: Bus | None = None,
        on_usage: Callable[[str, int], None] | None = None,  # (tenant_id, tokens) after each chat turn's call
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.tracing = tracing
        self.settings = settings
        self.store = store
        self.provider = provider
        self.metrics = metrics
        self.driver = driver
        self.runs = runs
        self.clock: Clock = driver.clock
        history = settings.kernel.history_max_messages
        memory = settings.memory
        self.reclaimer = Reclaimer(
            self.clock,
            after_evictions=memory.trim_after_evictions,
            interval_s=memory.trim_interval_s,
            on_trim=metrics.observe_trim,
        )
        self.sessions = Sessions(driver, store, runs, on_evicted=self.reclaimer.evicted)
        # The tenant's new session (`Sessions.create`: its agent, metadata, on_busy and owner).
        self.create_session = self.sessions.create
        chat = ChatTurns(driver, store, provider, metrics, self.clock, history, on_usage, tracing)
        agents = AgentTurns(runs, store, history) if runs is not None else None
        self.streams = TurnStreams(
            store,
            bus,
            live=lambda turn_id: self._turns.get(turn_id) is not None,
            shared_store=settings.store.backend == "postgres",
        )
        self._turns = Turns(
            driver,
            store,
            metrics,
            self.clock,
            self.sessions,
            chat,
            agents,
            self.streams,
            bus,
            tracing=tracing,
            forward_quiet_s=settings.coordination.forward_quiet_s,
        )
        # Admit a turn (or raise ShuttingDown / SessionNotFound / AdmissionRejected): `Turns.start`
        # itself, so its signature and documentation are stated once.
        self.start_turn = self._turns.start
        self.forwarding = self._turns.forwarding  # its statistics() are on /metrics
        self._lag_timer: asyncio.TimerHandle | None = None
        cluster = None if driver.cluster is None else driver.cluster.statistics
        metrics.bind(driver.kernel.statistics, store.statistics, lambda: len(self._turns), cluster)

    async def start(self) -> None:
        """Hear the other nodes' cancels (with `coordination.redis_url`); nothing otherwise."""
        await self._turns.epochs.start()
        await self._turns.forwarding.start()

    @property
    def kernel(self) -> Kernel:
        return self.driver.kernel

    @property
    def accepting(self) -> bool:
        return self._turns.accepting

    def tick(self) -> None:
        self.driver.tick()

    # -- sessions ---------------------------------------------------------------------------

    # Every call names the caller's tenant: another tenant's session is a SessionNotFound.

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord:
        return await self.sessions.get(tenant_id, session_id)

    async def ensure_loaded(self, tenant_id: str, session_id: str) -> None:
        await self.sessions.ensure_loaded(tenant_id, session_id)

    async def delete_session(self, tenant_id: str, session_id: str) -> None:
        await self.sessions.delete(tenant_id, session_id)

    # -- turns ------------------------------------------------------------------------------

    def offer_turn(self, tenant_id: str) -> None:
        """Refuse a turn of the tenant at once when the server drains or the gate is full: asked
        before the request's body is read and its session looked up, so a refusal reads, decodes
        and stores nothing. Passing admits nothing: `start_turn` decides again.

        Raises: ShuttingDown; AdmissionRejected ("overloaded", "tenant_concurrent_turns").
        """
        if not self.accepting:
            raise ShuttingDown("the server is shutting down")
        for command in self.driver.handle(TurnOffered(tenant_id)):
            if isinstance(command, RejectTurn):
                raise AdmissionRejected(command.retry_after_s, code=command.code)

    def offer_run(self, tenant_id: str) -> None:
        """`offer_turn` for a plain run (the runs API): before its body is read.

        Raises: ShuttingDown; AdmissionRejected ("overloaded", "tenant_active_runs").
        """
        if not self.accepting or (self.runs is not None and not self.runs.accepting):
            raise ShuttingDown("the server is shutting down")
        for command in self.driver.handle(RunOffered(tenant_id)):
            if isinstance(command, RejectRun):
                raise AdmissionRejected(command.retry_after_s, what="runs", code=command.code)

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        await self._turns.run(turn, sink)

    def cancel_turn(self, tenant_id: str, session_id: str, reason: str = "cancelled") -> str | None:
        """Cancel the running turn of a session in memory (`ensure_loaded` first).

        Raises: SessionNotFound (not in memory, or another tenant's).
        """
        self.sessions.check_loaded(tenant_id, session_id)
        return self._turns.cancel(session_id, reason)

    def cancel_turn_by_id(self, tenant_id: str, session_id: str, turn_id: str) -> bool:
        """Cancel one turn of a session in memory by id (a queued one leaves the queue); whether
        it was live here (another session's or tenant's turn is not).

        Raises: SessionNotFound (not in memory, or another tenant's).
        """
        self.sessions.check_loaded(tenant_id, session_id)
        turn = self._turns.get(turn_id)
        if turn is None or turn.session_id != session_id or turn.tenant_id != tenant_id:
            return False
        return self._turns.cancel_by_id(turn_id)

    async def cancel_turn_by_id_anywhere(self, tenant_id: str, session_id: str, turn_id: str) -> bool:
        """`cancel_turn_by_id`, and with PostgreSQL and a bus on the node where the turn lives
        (a turn queued behind another node's turn); whether a node cancelled it.

        Raises: SessionNotFound (not in memory, or another tenant's).
        """
        if self.cancel_turn_by_id(tenant_id, session_id, turn_id):
            return True
        return await self._turns.forwarding.cancel(tenant_id, session_id, turn_id)

    async def follow_turn(
        self, tenant_id: str, session_id: str, turn_id: str, after_seq: int
    ) -> AsyncGenerator[TurnEvent, None]:
        """The events of the tenant's turn after `after_seq`, stored then live (see `TurnStreams`).

        Raises (before the first event): SessionNotFound; NotFound (`turn_not_found`).
        """
        await self.sessions.get(tenant_id, session_id)
        turn = self._turns.get(turn_id)
        local = turn is not None and turn.tenant_id == tenant_id and turn.session_id == session_id
        if not local:
            await self.streams.check_exists(tenant_id, session_id, turn_id)
        return self.streams.follow(tenant_id, session_id, turn_id, after_seq, local=local)

    async def cancel_turn_anywhere(self, tenant_id: str, session_id: str) -> str | None:
        """Cancel the session's running turn, on this node or (PostgreSQL) any other.

        Raises: SessionNotFound (not in memory, or another tenant's); StoreUnavailable.
        """
        self.sessions.check_loaded(tenant_id, session_id)
        return await self._turns.cancel_anywhere(tenant_id, session_id)

    @property
    def live_turns(self) -> Iterable[str]:
        return self._turns.ids()

    # -- lifecycle --------------------------------------------------------------------------

    def start_lag_probe(self) -> None:
        """Measure how late the loop runs a timer: the queueing delay every request sees."""
        loop = asyncio.get_running_loop()

        def probe(expected: float) -> None:
            now = loop.time()
            lag_ms = max(0.0, now - expected) * 1000
            self.metrics.loop_lag_ms.observe(lag_ms)
            if self.accepting:
                due = now + next_probe_in(lag_ms)
                self._lag_timer = loop.call_at(due, probe, due)

        due = loop.time() + LAG_PROBE_SLOW_S
        self._lag_timer = loop.call_at(due, probe, due)

    async def drain(self, timeout_s: float) -> None:
        """Stop admitting turns and runs, let running turns finish (bounded), then cancel the rest."""
        self._turns.accepting = False
        if self.runs is not None:
            self.runs.accepting = False  # new runs and answers are refused too
        if not await self.wait_idle(timeout_s):
            self._turns.cancel_all("shutdown")
            await self.wait_idle(5.0)
        if self._lag_timer is not None:
            self._lag_timer.cancel()
        self.reclaimer.close()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no turn is live (every turn has ended and fed `TurnEnded` to the kernel).

        Returns False if turns were still live after `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._turns.idle.wait()
        except TimeoutError:
            return False
        return True
