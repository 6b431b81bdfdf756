"""Runs shared by several nodes on PostgreSQL: takeover, and requests for another node's run.

A run is driven by the node holding its lease (`agentos.agents.leases`). This module connects
the lease keeper to the lifecycle (a run taken over resumes from its journal exactly as at a
restart; a run lost stops here without writing) and carries requests across nodes:

- an answer, cancel or terminate that reaches a node which does not run the run is checked
  against the journal (the run is the caller's tenant's, waits for that operation...), written
  into `run_requests` with a NOTIFY in one transaction, and applied by the owner, which is woken
  by the NOTIFY (or takes it at its next tick, or, if it died, the node that takes the run over).
  The owner applies a request only to a run it has resumed, and here only (never sends it on);
  a request the run cannot take yet stays queued (`_settle`), so none is lost to a takeover.
  An answer kept because the run still works towards its wait is taken up again as soon as the
  run asks its next question or ends (`_watch` wakes the lease keeper), not at the keeper's next
  tick: that is a third of the lease away, past the sender's wait, which would then answer its
  client as if applied an answer the owner refuses a moment later.
  The sender waits (bounded) until the owner is done with it: applied (the row is gone), or
  refused for good (the run moved on since the sender's check): then the row holds the owner's
  error, which the sender raises, so its client gets the 409/422 the owner would have answered;
- a steer (`POST /v1/runs/{id}/steer`) goes the same way: the owner offers the message to its
  run (`RunRequests.offer_steer`) and keeps the request until the run took it in at its next
  step (journaled, with the request's key) or ended first; the row then holds the journal step
  (status 200, `seq`) or the refusal, which the sender reads to answer its client as the owner
  would have. A new owner finds a steer its dead predecessor journaled by that key: never twice;
- reads work on every node: the row, and the events replayed from the journal, followed by
  polling it until the run ends (token events are live only, on the owner).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import msgspec

from agentos.agents.checks import check_answer
from agentos.agents.engine import run_not_found
from agentos.agents.fanout import RunEvent
from agentos.agents.leases import LeaseKeeper, Request, send_request
from agentos.agents.lifecycle import RunLifecycle
from agentos.errors import AgentOSError, BadRequest, Conflict, InvalidInput, NotFound, RequestError
from agentos.journal.journal import TERMINAL, RunRow
from agentos.journal.postgres import PgJournalStore
from agentos.journal.store import JournalStore
from agentos.kernel import RunEnded, RunState
from agentos.store.pg_health import classify

log = logging.getLogger("agentos.agents")

FOLLOW_POLL_S = 0.2  # how often a node that does not run a run reads its new events
TERMINATE_WAIT_S = 30.0  # a terminate sent to another node waits this long for the run's end
REQUEST_WAIT_S = 5.0  # an answer or cancel sent to another node waits this long for the owner
STEER_WAIT_S = 30.0  # a steer waits for the run's next step: a tool call in flight, a model call
STEER_CHECK_S = 1.0  # meanwhile, whether the run ended (then the steer is refused, as on one node)
_OUTCOME = "SELECT outcome FROM run_requests WHERE id = $1"
_READ = "DELETE FROM run_requests WHERE id = $1"
_ERRORS: dict[int, type[RequestError]] = {400: BadRequest, 404: NotFound, 409: Conflict, 422: InvalidInput}


class RunRequests(Protocol):
    """What a request from another node calls on the owner (`RunService`)."""

    async def answer(
        self,
        tenant_id: str,
        run_id: str,
        operation_id: str,
        answer: str = ...,
        *,
        approve: bool | None,
        args_hash: str | None,
        forward: bool,
    ) -> Any: ...

    async def cancel(self, tenant_id: str, run_id: str, *, forward: bool) -> Any: ...

    async def terminate(self, tenant_id: str, run_id: str, *, forward: bool) -> Any: ...

    def offer_steer(self, tenant_id: str, run_id: str, text: str, key: str = ...) -> asyncio.Future[int | None]:
        """Offer `text` to a run working here, `key` journaled with it (resolves with its
        journal step, or None). Raises: Conflict `run_not_working`."""
        ...


def cluster_for(store: JournalStore, runs: RunLifecycle, service: RunRequests) -> RunCluster | None:
    """The cluster of a PostgreSQL journal; None for `runs.db` (one node)."""
    return RunCluster(store, runs, service) if isinstance(store, PgJournalStore) else None


class RunCluster:
    def __init__(self, store: PgJournalStore, runs: RunLifecycle, service: RunRequests) -> None:
        self._store = store
        self._runs = runs
        self._service = service
        self.keeper = LeaseKeeper(store, on_claimed=self._claimed, on_lost=self._lost, on_requests=self._requests)
        self._kept: set[str] = set()  # runs with an answer kept until they wait (`_settle`)
        # Steers from other nodes offered to a run here, by request id, until it took them in.
        self._steering: dict[int, asyncio.Future[int | None]] = {}
        runs.watchers.append(self._watch)

    # --- the owner's side ---

    async def _claimed(self, epochs: dict[str, int]) -> None:
        """Resume the runs taken over. One still in memory here is kept if this node held it
        at the epoch before (nobody ran it meanwhile), else stopped: another node ran it since,
        so its memory is stale; its lease expires again and it is resumed from the journal. A
        run not resumed because the database failed is let go the same way, never held (and
        renewed) without running, which would strand it and the requests for it."""
        if stale := sorted(
            r for r, e in epochs.items() if r in self._runs.handles and self._store.epochs.get(r) != e - 1
        ):
            self._lost(stale)
            epochs = {run_id: epoch for run_id, epoch in epochs.items() if run_id not in stale}
        for run_id, epoch in epochs.items():  # at once: renewed from now on, while they resume
            self._store.adopt(run_id, epoch)
        left = set(epochs)
        try:
            rows = await self._store.fetch("SELECT * FROM runs WHERE run_id = any($1::text[])", list(epochs))
            for row in sorted((RunRow(*r) for r in rows), key=lambda r: r.run_id):
                if row.status in TERMINAL:  # ended, but its lease stayed: nothing to resume
                    await self._store.write(self._store.journal.ended(row.run_id), run=row.run_id)
                    self._store.release(row.run_id)
                elif row.run_id not in self._runs.handles:
                    await self._resume(row)
                left.discard(row.run_id)
        finally:
            if gone := sorted(run for run in left if run not in self._runs.handles):
                log.warning(
                    "run leases: %d runs taken over but not resumed; their leases are left to expire", len(gone)
                )
            for run_id in gone:
                self._store.release(run_id)

    async def _resume(self, row: RunRow) -> None:
        try:
            await self._runs.recover_one(row)
        except Exception:  # the database failed, perhaps: the lease expires, and a node claims it again
            log.exception("run %s: taken over but not resumed; its lease is left to expire", row.run_id)
            self._store.release(row.run_id)
            self._runs.handles.pop(row.run_id, None)
            return
        # Lost while it resumed (a renewal came late): a working run fails its first write and
        # stops; a waiting one has none to fail, so it is stopped here.
        handle = self._runs.handles.get(row.run_id)
        if row.run_id not in self._store.epochs and handle is not None and handle.task is None:
            self._lost([row.run_id])

    def _lost(self, run_ids: list[str]) -> None:
        """Other nodes took these runs over: stop them here without a write, as a stopping server does."""
        for run_id in run_ids:
            self._store.release(run_id)
            self._kept.discard(run_id)
            handle = self._runs.handles.pop(run_id, None)
            if handle is not None:
                log.warning("run %s: its lease was lost (another node runs it now); stopped here", run_id)
            if handle is not None and handle.task is not None:
                handle.stop_reason = None  # cancelled so, `RunLifecycle._drive` leaves the run unfinished
                handle.task.cancel()
            elif handle is not None:
                self._runs.driver.handle(RunEnded(run_id, "suspended"))

    async def _requests(self, requests: list[Request]) -> dict[int, dict[str, Any] | None]:
        settled: dict[int, dict[str, Any] | None] = {}
        pending = {r.id for r in requests}  # a steer settled but no longer asked for: its run ended
        for request_id in [i for i, f in self._steering.items() if f.done() and i not in pending]:
            del self._steering[request_id]
        for r in requests:
            outcome = await self._settle(r)
            if outcome != "keep":
                settled[r.id] = outcome if isinstance(outcome, dict) else None
        return settled

    async def _settle(self, r: Request) -> Literal["keep", "applied"] | dict[str, Any]:
        """Apply a request to a run of this node; "keep" keeps it queued for a later round (or
        the next owner): the run is not resumed here, an answer comes while the run still works
        towards its wait (the journal showed the wait to the sender first), the node is closing
        or the database failed. "applied" once applied; the error (status, code, message) if refused
        for good (the run moved on since the sender's check): the sender raises it."""
        body = r.body
        if r.run_id not in self._runs.handles:  # not resumed here (yet), or just ending
            return "keep"
        if body.get("kind") == "steer":
            return await self._settle_steer(r)
        kernel = self._runs.driver.kernel
        if body.get("kind") == "answer" and kernel.run_state(r.run_id) is RunState.RUNNING:
            self._kept.add(r.run_id)  # its next question (or end) brings the next round
            return "keep"  # applied once it waits; a stale one is refused then, or goes with the run
        try:
            await self._apply(r.tenant_id, r.run_id, body)
        except RequestError as exc:
            if exc.status >= 500:  # shutting down: the node that takes the run over applies it
                return "keep"
            log.info("run %s: request %s from another node refused: %s", r.run_id, body.get("kind"), exc)
            return {"status": exc.status, "code": exc.code, "message": exc.message}
        except AgentOSError as exc:  # the database, or the lease just lost: later, or by the next owner
            log.info("run %s: request %s from another node kept for later: %s", r.run_id, body.get("kind"), exc)
            return "keep"
        except Exception:  # a bug: never retried in a loop
            log.exception("run %s: request %s from another node failed; dropped", r.run_id, body.get("kind"))
        return "applied"

    async def _settle_steer(self, r: Request) -> Literal["keep"] | dict[str, Any]:
        """Offer a steer to the run once; keep the request until the run took it in (its journal
        step, for the sender) or ended first (refused, as on one node). A steer the journal
        holds already (its owner died before answering) is answered from there, not taken twice."""
        delivered = self._steering.get(r.id)
        if delivered is None:
            key = f"request:{r.id}"
            if (seq := await self._journaled(r, key)) is not None:
                return {"status": 200, "seq": seq}
            try:
                delivered = self._service.offer_steer(r.tenant_id, r.run_id, str(r.body.get("input", "")), key)
            except RequestError as exc:  # not working (waiting for a human, stopping): as on one node
                return {"status": exc.status, "code": exc.code, "message": exc.message}
            self._steering[r.id] = delivered
            delivered.add_done_callback(lambda _: self.keeper.wake())  # the next round answers it
        if not delivered.done():
            return "keep"
        del self._steering[r.id]
        seq = delivered.result()
        if seq is None:
            message = f"run {r.run_id!r} stopped before its next step"
            return {"status": 409, "code": "run_not_working", "message": message}
        return {"status": 200, "seq": seq}

    async def _journaled(self, r: Request, key: str) -> int | None:
        """The journal step of the run that holds the steer `key`, if one does."""
        steps = await self._store.load_steps(r.tenant_id, r.run_id)
        return next((s.seq for s in steps if s.kind == "user" and (s.input or {}).get("key") == key), None)

    def _watch(self, tenant_id: str, run_id: str, event_type: str, data: dict[str, Any]) -> None:
        """A run's `run.*` or `human.*` event: one with an answer kept (`_settle`) may take it
        now (it asks its next question, `human.requested`, and is waiting as soon as this
        returns) or has ended: the keeper takes the requests again at once."""
        if run_id in self._kept:
            self._kept.discard(run_id)
            self.keeper.wake()

    async def _apply(self, tenant_id: str, run_id: str, r: dict[str, Any]) -> None:
        if r["kind"] == "answer":
            await self._service.answer(
                tenant_id,
                run_id,
                r["operation_id"],
                r["answer"],
                approve=r["approve"],
                args_hash=r["args_hash"],
                forward=False,
            )
        elif r["kind"] == "terminate":
            await self._service.terminate(tenant_id, run_id, forward=False)
        else:
            await self._service.cancel(tenant_id, run_id, forward=False)

    # --- another node's run ---

    async def forward(self, tenant_id: str, run_id: str, request: dict[str, Any]) -> bool:
        """Send `request` to the node that drives the run; False if this node does (or it ended).
        Returns once the owner applied it (a terminate: once the run ended), bounded.

        Raises: NotFound, Conflict, InvalidInput (an answer the owner would refuse, here or
            there: the owner's own error), StoreError.
        """
        row = await self.remote_row(tenant_id, run_id)
        if row is None:
            return False
        if request["kind"] == "answer":
            await self.check_answer(
                row, request["operation_id"], request["answer"], request["approve"], request["args_hash"]
            )
        request_id = await self.send(row, request)
        # As on the owner: an answer returns once the run goes on, a terminate once it ended.
        await self.settled(request_id, TERMINATE_WAIT_S if request["kind"] == "terminate" else REQUEST_WAIT_S)
        return True

    async def steer(self, row: RunRow, text: str) -> int | None:
        """Send a steer to the node that drives the run (`row`, from `remote_row`) and wait
        (bounded) until its run took it in: its journal step. None when the wait ran out: the
        request stays queued for the run (or the node that takes it over), which takes it in at
        its next step.

        Raises: Conflict `run_not_working` (the owner refused it: the run waits for a human, or
            ended before its next step), NotFound, StoreError.
        """
        request_id = await self.send(row, {"kind": "steer", "input": text})  # the owner says if it works
        for _ in range(int(STEER_WAIT_S / STEER_CHECK_S)):
            outcome = await self.settled(request_id, STEER_CHECK_S)
            if outcome is not None:
                return int(outcome["seq"])
            current = await self._store.load_run(row.tenant_id, row.run_id)
            pending = await self._store.query(_OUTCOME, request_id)
            if current is None or current.status in TERMINAL or not pending:  # it ended first
                await self._store.query(_READ, request_id)
                raise Conflict(f"run {row.run_id!r} ended before its next step", code="run_not_working")
        return None

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

    async def check_answer(
        self, row: RunRow, operation_id: str, answer: str, approve: bool | None, args_hash: str | None
    ) -> None:
        """What the owner's kernel would refuse at once. Raises: Conflict, InvalidInput."""
        steps = await self._store.load_steps(row.tenant_id, row.run_id)
        step = steps[-1] if steps else None
        if row.status != "waiting_human" or step is None or step.kind != "human" or step.status != "waiting":
            raise Conflict(f"run {row.run_id!r} is not waiting for a human", code="not_waiting")
        if step.operation_id != operation_id:
            message = f"operation {operation_id!r} is not awaiting an answer (pending: {step.operation_id!r})"
            raise Conflict(message, code="operation_mismatch")
        check_answer(step.input, answer, approve, args_hash)

    async def send(self, row: RunRow, request: dict[str, Any]) -> int:
        """Leave `request` for the run's owner and wake it; returns the request's id.

        Raises: StoreUnavailable, StoreError.
        """
        body = msgspec.json.encode(request).decode()
        try:
            return await send_request(self._store, row.tenant_id, row.run_id, body, self._runs.now_ms())
        except Exception as exc:
            raise classify(exc, self._store.unavailable, "run request") from exc

    async def settled(self, request_id: int, timeout_s: float) -> dict[str, Any] | None:
        """Wait until the owner is done with the request (its row is gone: applied, or the run
        ended), or `timeout_s` passed (the owner died, perhaps: the request waits for the node
        that takes the run over, and the reply shows the run as it is). Returns the owner's
        outcome when it left one for the sender (a steer's journal step), else None.

        Raises: the owner's RequestError (Conflict, InvalidInput...) if it refused the request.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for _ in range(int(timeout_s / FOLLOW_POLL_S) + 1):
            rows = await self._store.query(_OUTCOME, request_id)
            if not rows or loop.time() >= deadline:
                return None
            if rows[0][0] is not None:
                await self._store.query(_READ, request_id)  # read: the sender was the one waiting for it
                outcome: dict[str, Any] = msgspec.json.decode(rows[0][0])
                if outcome.get("status") == 200:
                    return outcome
                raise _refusal(outcome)
            await asyncio.sleep(FOLLOW_POLL_S)  # another process's state: read it again
        return None

    async def follow(self, tenant_id: str, run_id: str, after_seq: int) -> AsyncIterator[RunEvent]:
        """The run's journaled events after `after_seq`, read again until the terminal one."""
        last = after_seq
        while True:
            rows = await self._store.load_events(tenant_id, run_id, last)
            for row in rows:
                last = row.seq
                yield RunEvent(row.seq, row.type, row.payload())
                if row.type.startswith("run.") and row.type[4:] in TERMINAL:
                    return
            if not rows:
                await asyncio.sleep(FOLLOW_POLL_S)  # the owner writes them: read the journal again


def _refusal(outcome: dict[str, Any]) -> RequestError:
    """The error the owner raised, raised again on the sender (its class from its status)."""
    error = _ERRORS.get(int(outcome.get("status", 409)), Conflict)
    return error(str(outcome.get("message", "refused by the node that runs the run")), code=outcome.get("code"))
