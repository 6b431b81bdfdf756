"""Retention: deleting what outlived its tenant's `retention_s`, in the background, in small batches.

Theory of operation. Every `[retention] interval_s` one sweep visits each tenant whose effective
`retention_s` (its own override, else `[tenant_limits]`) is not 0, with the cut-off
`now - retention_s` (`now` from the wall clock the services were given: a test's FakeClock):
- access rows and usage (ledger) rows logged before the cut-off are deleted oldest first, at most
  `batch_rows` per transaction, until none is left;
- sessions are read `batch_rows` at a time in id order; one with no activity since the cut-off
  (created before it, no message written since) is deleted through the runtime, exactly as
  `DELETE /v1/sessions/{id}` deletes it: transcript, events, access rows, its runs, and its
  in-memory state. A session whose turn runs (here, or on another node: `Store.running_turn`),
  or with an unfinished run (a run waiting for a human), is skipped and counted; it is looked at
  again at the next sweep;
- runs (`ExpiringRuns`, the run service): finished runs outside any session whose last update is
  before the cut-off, `batch_rows` at a time; a working run is never one of them.
Each deletion is its own transaction on the store's writer thread (SQLite) or pool (PostgreSQL):
the event loop only awaits it. Several nodes may sweep the same tenant: every deletion is
idempotent (a session deleted meanwhile answers SessionNotFound, which is passed over).

Usage::

    retention = Retention(runtime, policies, settings.retention, wall_clock, runs=run_service)
    retention.start()              # the periodic sweep; `await retention.sweep()` runs one now
    await retention.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from agentos.clock import Clock
from agentos.config import RetentionConfig
from agentos.errors import SessionNotFound, StoreError
from agentos.waiting import wait_event

if TYPE_CHECKING:
    from agentos.runtime.runtime import Runtime

log = logging.getLogger("agentos.retention")

Kind = Literal["sessions", "runs", "access", "usage"]
KINDS: tuple[Kind, ...] = ("sessions", "runs", "access", "usage")
Policies = Callable[[], Iterable[tuple[str, int]]]  # (tenant_id, retention_s) of every tenant


class ExpiringRuns(Protocol):
    """The run service's side (the agents layer implements it)."""

    async def session_has_open_runs(self, tenant_id: str, session_id: str) -> bool:
        """Whether a run of the session is unfinished (working, or waiting for a human)."""
        ...

    async def delete_idle_runs(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        """Delete up to `limit` finished top-level runs of the tenant outside any session, last
        updated before `before_ms`, with their children; how many runs were deleted."""
        ...


@dataclass(slots=True)
class RetentionStatistics:
    sweeps_total: int = 0
    deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))  # by Kind: rows (sessions, runs)
    batches_total: int = 0  # deletions, each one transaction
    skipped_active_total: int = 0  # expired sessions left alone: a turn was running
    failed_total: int = 0  # sweeps cut short by a store error (retried at the next)


@dataclass(eq=False)
class Retention:
    runtime: Runtime
    policies: Policies
    config: RetentionConfig
    wall_clock: Clock
    _: KW_ONLY
    runs: ExpiringRuns | None = None
    _stats: RetentionStatistics = field(init=False, default_factory=RetentionStatistics)
    _task: asyncio.Task[None] | None = field(init=False, default=None)
    # set when a sweep ends; `wait_swept` clears it
    _swept: asyncio.Event = field(init=False, default_factory=asyncio.Event)

    def statistics(self) -> RetentionStatistics:
        return self._stats

    async def wait_swept(self, timeout_s: float) -> bool:
        """Wait for the next sweep to end (True), or `timeout_s` (False)."""
        self._swept.clear()
        return await wait_event(self._swept, timeout_s)

    def start(self) -> None:
        """Sweep every `interval_s` from now on, in a task of its own (nothing to do when no
        tenant has a retention: a sweep then reads nothing)."""
        self._task = asyncio.create_task(self._every_interval(), name="agentos-retention")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval_s)
            try:
                await self.sweep()
            except StoreError:  # a database away: the next sweep picks up where this one stopped
                self._stats.failed_total += 1
                log.warning("retention sweep failed; retrying in %.0f s", self.config.interval_s, exc_info=True)
            except Exception:  # a bug must not end the sweeping for the process's lifetime, unseen
                self._stats.failed_total += 1
                log.exception("retention sweep failed")

    async def sweep(self) -> None:
        """Delete what every tenant keeps past its retention, now.

        Raises: StoreError (StoreUnavailable): a store failed; what was deleted before stays deleted.
        """
        now_ms = int(self.wall_clock.now() * 1000)
        for tenant_id, retention_s in list(self.policies()):
            if retention_s > 0:
                await self._sweep_tenant(tenant_id, now_ms - retention_s * 1000)
        self._stats.sweeps_total += 1
        self._swept.set()

    async def _sweep_tenant(self, tenant_id: str, before_ms: int) -> None:
        store, limit = self.runtime.store, self.config.batch_rows
        await self._drain("access", lambda: store.expire_access(tenant_id, before_ms, limit=limit))
        await self._drain("usage", lambda: store.expire_usage(tenant_id, before_ms, limit=limit))
        await self._expire_sessions(tenant_id, before_ms)
        if self.runs is not None:
            runs = self.runs
            await self._drain("runs", lambda: runs.delete_idle_runs(tenant_id, before_ms, limit=limit))

    async def _drain(self, kind: Kind, delete_batch: Callable[[], Awaitable[int]]) -> None:
        """Run `delete_batch` (one bounded transaction) until it deletes less than a full batch."""
        while True:
            deleted = await delete_batch()
            self._stats.batches_total += 1
            self._stats.deleted[kind] += deleted
            if deleted < self.config.batch_rows:
                return

    async def _expire_sessions(self, tenant_id: str, before_ms: int) -> None:
        after: str | None = ""
        while after is not None:
            idle, after = await self.runtime.store.idle_sessions(
                tenant_id, before_ms, after=after, limit=self.config.batch_rows
            )
            for session_id in idle:
                await self._expire_session(tenant_id, session_id)

    async def _expire_session(self, tenant_id: str, session_id: str) -> None:
        if await self._busy(tenant_id, session_id):
            self._stats.skipped_active_total += 1
            return
        with contextlib.suppress(SessionNotFound):  # deleted meanwhile (a DELETE, another node)
            await self.runtime.delete_session(tenant_id, session_id)
            self._stats.batches_total += 1
            self._stats.deleted["sessions"] += 1

    async def _busy(self, tenant_id: str, session_id: str) -> bool:
        """A turn of the session runs (here, or on another node), or one of its runs is unfinished:
        deleting the session would stop it."""
        runtime = self.runtime
        if runtime.kernel.active_turn(session_id) is not None:
            return True
        if await runtime.store.running_turn(tenant_id, session_id) is not None:
            return True
        return self.runs is not None and await self.runs.session_has_open_runs(tenant_id, session_id)
