"""Runs shared by several nodes on PostgreSQL: takeover, and requests for another node's run.

A run is driven by the node holding its lease (`agentos.agents.leases`). This module connects
the lease keeper to the lifecycle (a run taken over resumes from its journal exactly as at a
restart; a run lost stops here without writing) and carries requests across nodes:

- an answer, cancel or terminate that reaches a node which does not run the run is checked
  against the journal (the run is the caller's tenant's, waits for that operation...), written
  into `run_requests` with a NOTIFY in one transaction, and applied by the owner, which is woken
  by the NOTIFY (or takes it at its next tick, or, if it died, the node that takes the run over);
- reads work on every node: the row, and the events replayed from the journal, followed by
  polling it until the run ends (token events are live only, on the owner).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import msgspec

from agentos.agents.checks import check_answer
from agentos.agents.engine import run_not_found
from agentos.agents.fanout import RunEvent
from agentos.agents.journal import TERMINAL, RunRow
from agentos.agents.journal_pg import PgJournalStore
from agentos.agents.journal_store import JournalStore
from agentos.agents.leases import CHANNEL, LeaseKeeper
from agentos.agents.lifecycle import RunLifecycle
from agentos.errors import AgentOSError, Conflict
from agentos.kernel import RunEnded
from agentos.store.pg_health import classify

log = logging.getLogger("agentos.agents")

FOLLOW_POLL_S = 0.2  # how often a node that does not run a run reads its new events
TERMINATE_WAIT_S = 30.0  # a terminate sent to another node waits this long for the run's end
ANSWER_WAIT_S = 5.0  # an answer sent to another node waits this long for the run to go on
_SEND = "INSERT INTO run_requests (tenant_id, run_id, body, created_ms) VALUES ($1, $2, $3::jsonb, $4)"


class RunRequests(Protocol):
    """What a request from another node calls on the owner (`RunService`)."""

    async def answer(self, tenant_id: str, run_id: str, operation_id: str, answer: str = "", *,
                     approve: bool | None = None, args_hash: str | None = None) -> Any: ...  # fmt: skip

    async def cancel(self, tenant_id: str, run_id: str) -> Any: ...

    async def terminate(self, tenant_id: str, run_id: str) -> Any: ...


def cluster_for(store: JournalStore, runs: RunLifecycle, service: RunRequests) -> RunCluster | None:
    """The cluster of a PostgreSQL journal; None for `runs.db` (one node)."""
    return RunCluster(store, runs, service) if isinstance(store, PgJournalStore) else None


class RunCluster:
    def __init__(self, store: PgJournalStore, runs: RunLifecycle, service: RunRequests) -> None:
        self._store = store
        self._runs = runs
        self._service = service
        self.keeper = LeaseKeeper(store, on_claimed=self._claimed, on_lost=self._lost, on_requests=self._requests)

    # --- the owner's side ---

    async def _claimed(self, epochs: dict[str, int]) -> None:
        for run_id, epoch in epochs.items():  # at once: renewed from now on, while they resume
            self._store.adopt(run_id, epoch)
        rows = await self._store.fetch("SELECT * FROM runs WHERE run_id = any($1::text[])", list(epochs))
        for row in sorted((RunRow(*r) for r in rows), key=lambda r: r.run_id):
            if row.status in TERMINAL:  # ended, but its lease stayed: nothing to resume
                await self._store.write([("DELETE FROM run_leases WHERE run_id = $1", (row.run_id,))], run=row.run_id)
                self._store.release(row.run_id)
            elif row.run_id not in self._runs.handles:
                await self._resume(row)

    async def _resume(self, row: RunRow) -> None:
        try:
            await self._runs.recover_one(row)
        except Exception:  # the database failed, perhaps: the lease expires, and a node claims it again
            log.exception("run %s: taken over but not resumed; its lease is left to expire", row.run_id)
            self._store.release(row.run_id)
            self._runs.handles.pop(row.run_id, None)

    def _lost(self, run_ids: list[str]) -> None:
        """Other nodes took these runs over: stop them here without a write, as a stopping server does."""
        for run_id in run_ids:
            self._store.release(run_id)
            handle = self._runs.handles.pop(run_id, None)
            if handle is not None:
                log.warning("run %s: its lease was lost (another node runs it now); stopped here", run_id)
            if handle is not None and handle.task is not None:
                handle.stop_reason = None  # cancelled so, `RunLifecycle._drive` leaves the run unfinished
                handle.task.cancel()
            elif handle is not None:
                self._runs.driver.handle(RunEnded(run_id, "suspended"))

    async def _requests(self, requests: list[tuple[str, str, dict[str, Any]]]) -> None:
        for tenant_id, run_id, body in requests:
            try:
                await self._apply(tenant_id, run_id, body)
            except AgentOSError as exc:  # the sender was answered already; the run moved on
                log.warning("run %s: request %s from another node not applied: %s", run_id, body.get("kind"), exc)

    async def _apply(self, tenant_id: str, run_id: str, r: dict[str, Any]) -> None:
        if r["kind"] == "answer":
            await self._service.answer(tenant_id, run_id, r["operation_id"], r["answer"], approve=r["approve"],
                                       args_hash=r["args_hash"])  # fmt: skip
        elif r["kind"] == "terminate":
            await self._service.terminate(tenant_id, run_id)
        else:
            await self._service.cancel(tenant_id, run_id)

    # --- another node's run ---

    async def forward(self, tenant_id: str, run_id: str, request: dict[str, Any]) -> bool:
        """Send `request` to the node that drives the run; False if this node does (or it ended).
        A terminate returns once the journal shows the run ended (bounded).

        Raises: NotFound, Conflict, InvalidInput (an answer the owner would refuse), StoreError.
        """
        row = await self.remote_row(tenant_id, run_id)
        if row is None:
            return False
        if request["kind"] == "answer":
            await self.check_answer(row, request["operation_id"], request["answer"], request["approve"],
                                    request["args_hash"])  # fmt: skip
        await self.send(row, request)
        if request["kind"] == "terminate":  # answers once the run ended, as on the owner
            await self.settled(row, lambda r: r.status in TERMINAL, TERMINATE_WAIT_S)
        elif request["kind"] == "answer":  # answers once the run goes on, as on the owner
            await self.settled(row, lambda r: r.status != "waiting_human", ANSWER_WAIT_S)
        return True

    async def remote_row(self, tenant_id: str, run_id: str) -> RunRow | None:
        """The tenant's run's row if another node runs it; None if this node does, or it ended.

        Raises: NotFound (also for another tenant's run).
        """
        if run_id in self._runs.handles:
            return None
        row = await self._store.load_run(tenant_id, run_id)
        if row is None:
            raise run_not_found(run_id)
        return None if row.status in TERMINAL else row

    async def check_answer(self, row: RunRow, operation_id: str, answer: str, approve: bool | None,
                           args_hash: str | None) -> None:  # fmt: skip
        """What the owner's kernel would refuse at once. Raises: Conflict, InvalidInput."""
        steps = await self._store.load_steps(row.tenant_id, row.run_id)
        step = steps[-1] if steps else None
        if row.status != "waiting_human" or step is None or step.kind != "human" or step.status != "waiting":
            raise Conflict(f"run {row.run_id!r} is not waiting for a human", code="not_waiting")
        if step.operation_id != operation_id:
            message = f"operation {operation_id!r} is not awaiting an answer (pending: {step.operation_id!r})"
            raise Conflict(message, code="operation_mismatch")
        check_answer(step.input, answer, approve, args_hash)

    async def send(self, row: RunRow, request: dict[str, Any]) -> None:
        """Leave `request` for the run's owner and wake it.

        Raises: StoreUnavailable, StoreError.
        """
        body = msgspec.json.encode(request).decode()
        try:
            timeout = self._store.config.postgres_acquire_timeout_s
            async with self._store.pool.acquire(timeout=timeout) as conn, conn.transaction():
                await conn.execute(_SEND, row.tenant_id, row.run_id, body, self._runs.now_ms())
                await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, row.run_id)
        except Exception as exc:
            raise classify(exc, self._store.unavailable, "run request") from exc

    async def settled(self, row: RunRow, done: Callable[[RunRow], bool], timeout_s: float) -> None:
        """Wait until the journal's row of the run satisfies `done`, or `timeout_s` passed (the
        owner died, perhaps: the request waits for the node that takes the run over)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for _ in range(int(timeout_s / FOLLOW_POLL_S) + 1):
            current = await self._store.load_run(row.tenant_id, row.run_id)
            if current is None or done(current) or loop.time() >= deadline:
                return
            await asyncio.sleep(FOLLOW_POLL_S)  # another process's state: read it again

    async def follow(self, tenant_id: str, run_id: str, after_seq: int) -> AsyncIterator[RunEvent]:
        """The run's journaled events after `after_seq`, read again until the terminal one."""
        last = after_seq
        while True:
            rows = await self._store.load_events(tenant_id, run_id, last)
            for row in rows:
                last = row.seq
                yield RunEvent(row.seq, row.type, msgspec.json.decode(row.data))
                if row.type.startswith("run.") and row.type[4:] in TERMINAL:
                    return
            if not rows:
                await asyncio.sleep(FOLLOW_POLL_S)  # the owner writes them: read the journal again
