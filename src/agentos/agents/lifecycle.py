"""The lifecycle of runs, decided by the kernel and carried out here.

Whether a run may start (`max_active_runs`), when it stops, whether an answer binds to the
pending request, when a human deadline expires and which children a cancel reaches: all of
that is `agentos.kernel.runs`, pure logic fed through the shared `Driver`. This module turns
its commands into tasks and journal writes:

    StartRun   -> a task runs `Runner.drive` until the run finishes or parks
    StopRun    -> soft: the runner stops at its next step boundary; hard: the task is cancelled
    FinishRun  -> a run with no task (waiting) ends: journal it, publish, wake its waiters
    ExpireHuman-> journal the waiting step as timed out (FinishRun follows)

A run's task reports how it ended with `RunEnded`; a run that parks reports `HumanRequested`
instead (a run taken over by another node, `LeaseLost`, ends here as suspended). Journal writes
go through the one ordered queue, so a task started after a write reads what the write wrote.

Tenancy: a run (and a child run, `delegate`) is its submitter's tenant's; recovery resumes each
run under the tenant on its row.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

from agentos.agents.agents import AgentRegistry
from agentos.agents.engine import RunEngine, run_not_found
from agentos.agents.forks import ForkEdit, fork_steps
from agentos.agents.handle import RunHandle
from agentos.agents.pacer import Pacer
from agentos.agents.runner import Runner
from agentos.config.agents import AgentSpec
from agentos.errors import AdmissionRejected, LeaseLost, StoreUnavailable, new_error_id
from agentos.journal.journal import TERMINAL, RunRow, Step, StepKind, StepStatus
from agentos.kernel import (
    ExpireHuman,
    FinishRun,
    HumanRequested,
    RejectRun,
    RunEnded,
    RunResumed,
    RunSubmitted,
    StartRun,
    StopRun,
)
from agentos.providers.base import Message
from agentos.runtime.driver import Driver

log = logging.getLogger("agentos.agents")


class RunLifecycle(RunEngine):
    def __init__(self, *, agents: AgentRegistry, driver: Driver, **engine: Any) -> None:
        super().__init__(driver=driver, **engine)
        self.agents = agents
        self.driver = driver
        self._runner = Runner(self)
        self._pacer = Pacer()
        self._waiters: dict[str, list[asyncio.Future[RunRow]]] = {}
        driver.on(StartRun, self._on_start)
        driver.on(StopRun, self._on_stop)
        driver.on(FinishRun, self._on_finish)
        driver.on(ExpireHuman, self._on_expire)

    async def stop(self, drain_s: float) -> None:
        """Suspend every run at its next step boundary (up to `drain_s`), then cancel the rest."""
        self.closing = True
        tasks = [h.task for h in self.handles.values() if h.task is not None]
        if tasks and drain_s > 0:
            await asyncio.wait(tasks, timeout=drain_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- starting ---

    async def submit(
        self,
        tenant_id: str,
        spec: AgentSpec,
        text: str,
        session_id: str | None,
        run_id: str,
        *,
        parent: RunHandle | None = None,
        context: list[Message] | None = None,
        owner: str | None = None,
    ) -> RunHandle:
        """Admit and start a new run of `tenant_id`; returns once its row is committed. `owner`:
        the end user it is for (a child run is its parent's user's).

        Raises:
            AdmissionRejected: over `kernel.max_active_runs` (code "overloaded") or the tenant's
                `max_active_runs` ("tenant_active_runs").
        """
        parent_id = parent.run_id if parent else None
        spec_ref, context_ref, writes = self.payloads(tenant_id, spec, context)
        now = self.now_ms()
        depth = parent.row.depth + 1 if parent else 0
        row = RunRow(
            run_id,
            tenant_id,
            spec.name,
            session_id,
            parent_id,
            depth,
            spec_ref,
            text,
            "queued",
            None,
            None,
            now,
            now,
            context_ref,
            parent.row.owner if parent else owner,
        )
        return await self.admit(row, spec, context, writes)

    async def admit(
        self,
        row: RunRow,
        spec: AgentSpec,
        context: list[Message] | None,
        writes: list[Any],
        steps: list[Step] | None = None,
    ) -> RunHandle:
        """Admit the new run `row`, write its row after `writes` and start it; returns once it is
        committed. `steps`: its journal so far (a fork's copied steps), in the same commit.

        Raises: AdmissionRejected (see `submit`)."""
        run_id, tenant_id, parent_id = row.run_id, row.tenant_id, row.parent_run_id
        if not await self.driver.hold_run(run_id, tenant_id, parent_id):  # the tenant's cap over every node
            raise AdmissionRejected(self.driver.kernel.limits.retry_after_s, what="runs", code="tenant_active_runs")
        writes = writes + self.journal.create_run(row)
        self.traces.submitted(row)
        handle = self.new_handle(row, spec, context)
        held: list[Callable[[], None]] = []  # its first event is heard of once it is committed
        if row.forked_from is not None:
            writes += self._forked(handle, steps or [], held)
        created = handle.created = asyncio.get_running_loop().create_future()
        commands = self.driver.handle(RunSubmitted(run_id, parent_id, row.tenant_id))
        if isinstance(commands[0], RejectRun):
            self.handles.pop(run_id, None)
            raise AdmissionRejected(commands[0].retry_after_s, what="runs", code=commands[0].code)
        try:
            await self.store.write(writes)  # concurrent starts share one commit (group commit)
        except BaseException as exc:
            created.set_exception(exc)
            raise
        self.store.adopt(run_id, 1)  # born owned by this node (a lease on PostgreSQL)
        for publish in held:
            publish()
        # The task (started by StartRun) wakes after this call returns: its caller answers first.
        created.set_result(None)
        return handle

    async def fork(self, tenant_id: str, run_id: str, at_seq: int, edit: ForkEdit | None, fork_id: str) -> RunHandle:
        """Start run `fork_id`: the tenant's run `run_id`'s journal up to step `at_seq` (the last
        step edited by `edit`), then live (`agentos.agents.forks`). The original is not touched.

        Raises: NotFound (also another tenant's run); InvalidInput (`fork_steps`);
            AdmissionRejected (see `submit`)."""
        row = await self.store.load_run(tenant_id, run_id)
        if row is None:
            raise run_not_found(run_id)
        steps = fork_steps(await self.store.load_steps(tenant_id, run_id), at_seq, edit, run_id, fork_id)
        spec_data, _, context = await self.store.resume_state(row)
        spec = self.spec_of(row.spec_ref, spec_data)
        now = self.now_ms()
        # Its own top-level run (no parent waits for it), on the original's spec snapshot, input
        # and session context: the same payloads, so nothing is stored again.
        fork = replace(row, run_id=fork_id, parent_run_id=None, status="queued", result=None, reason=None)
        fork = replace(fork, created_ms=now, updated_ms=now, forked_from=run_id, forked_at_seq=at_seq)
        return await self.admit(fork, spec, list(context or []), [], steps)

    def _forked(self, handle: RunHandle, steps: list[Step], held: list[Callable[[], None]]) -> list[Any]:
        """A fork's copied steps and its first event, `run.forked` (instead of `run.started`)."""
        tenant, now, journal = handle.row.tenant_id, self.now_ms(), self.journal
        writes: list[Any] = []
        for step in steps:
            kind, status = cast(StepKind, step.kind), cast(StepStatus, step.status)
            writes += journal.begin_step(tenant, handle.run_id, step.seq, kind, status, step.input, now)
            if step.output is not None:
                writes += journal.finish_step(tenant, handle.run_id, step.seq, status, step.output, now)
        handle.steps = list(steps)
        origin = {"agent": handle.row.agent, "forked_from": handle.row.origin()}
        self.emit(handle, "run.forked", origin, into=writes, held=held)
        return writes

    def _on_start(self, command: StartRun) -> None:
        handle = self.handles[command.run_id]
        handle.outcome = "suspended"
        handle.task = task = asyncio.create_task(self._drive(handle), name=f"run-{handle.run_id}")
        task.add_done_callback(lambda _: self._never_driven(handle, task))

    def _never_driven(self, handle: RunHandle, task: asyncio.Task[None]) -> None:
        """A task cancelled before its first step skips all of `_drive`, its `finally` too (a
        lease lost, or a hard stop, in the same loop turn as the start): without this the kernel
        would count the run as working for good. `_drive` clears `handle.task` once it ran."""
        if handle.task is not task:
            return
        handle.task = None
        if handle.stop_reason is not None and not self.closing:  # a hard stop: end it as `_drive` would
            handle.task = asyncio.create_task(self._stopped(handle), name=f"run-{handle.run_id}")
        elif handle.outcome != "parked":
            self.driver.handle(RunEnded(handle.run_id, handle.outcome))

    async def _stopped(self, handle: RunHandle) -> None:
        try:
            await self.finish(handle, "cancelled", reason=handle.stop_reason or "cancelled")
        finally:
            handle.task = None
            if handle.outcome != "parked":  # never is: narrows the type
                self.driver.handle(RunEnded(handle.run_id, handle.outcome))

    async def _drive(self, handle: RunHandle) -> None:
        try:
            await self._work(handle)
        except asyncio.CancelledError:
            if handle.stop_reason is None or self.closing:
                raise  # the server is stopping: the run stays unfinished, resumes at start-up
            task = asyncio.current_task()
            outside = task is not None and task.uncancel() > 0
            await asyncio.shield(self.finish(handle, "cancelled", reason=handle.stop_reason))
            if outside:
                raise
        except LeaseLost:  # another node runs it now (this one paused past its lease): leave it
            log.warning("run %s: taken over by another node, stopped here", handle.run_id)
            self.handles.pop(handle.run_id, None)
        except StoreUnavailable as exc:  # the database went away under the run: nobody's bug
            self._leave_to_the_journal(handle, exc)
        except Exception:  # a bug must end this run with a reason, not hang it
            error_id = new_error_id()
            log.exception("run %s failed (error_id=%s)", handle.run_id, error_id)
            await self.finish(handle, "failed", reason=f"internal_error: {error_id}")
        finally:
            if asyncio.current_task() is handle.task:
                handle.task = None
            if handle.outcome != "parked":
                self.driver.handle(RunEnded(handle.run_id, handle.outcome))

    def _leave_to_the_journal(self, handle: RunHandle, exc: StoreUnavailable) -> None:
        """The run's writes cannot reach the database. If its row never was stored, its start
        was answered 503 and it is forgotten. If it was, it stays unfinished in the journal, as
        after a crash: this node lets its lease go, so once the database answers a node (this
        one's lease keeper too) takes it over and resumes it from its last journaled step (on
        SQLite, the next start resumes it)."""
        self.handles.pop(handle.run_id, None)
        self.store.release(handle.run_id)
        log.info("run %s: stopped here, the store cannot be reached (%s); its journal resumes it", handle.run_id, exc)

    async def _work(self, handle: RunHandle) -> None:
        if handle.created is not None:
            created, handle.created = handle.created, None
            await created  # the row is durable; raises if it could not be written
        await self._pacer.wait()  # a burst of runs starts in waves (agents/pacer.py)
        if handle.steps is None:
            tenant = handle.row.tenant_id
            handle.steps = await self.store.load_steps(tenant, handle.run_id)
        if handle.status in ("queued", "waiting_human"):
            if handle.status == "queued" and not handle.steps and handle.row.forked_from is None:
                self.emit(handle, "run.started", {"agent": handle.row.agent})
            handle.status = "running"
            self.store.write_nowait(
                [self.journal.set_status(handle.run_id, "running", self.now_ms())], run=handle.run_id
            )
        await self._runner.drive(handle)

    def _on_stop(self, command: StopRun) -> None:
        handle = self.handles.get(command.run_id)
        if handle is None:
            return
        handle.stop_reason = command.reason
        handle.cancel_requested = True  # soft: the runner ends the run at its next step boundary
        if command.hard and handle.task is not None:
            handle.task.cancel()

    # --- RunHost: what the runner calls ---

    async def finish(self, handle: RunHandle, status: str, *, result: str | None = None, reason: str) -> None:
        """Record the run's terminal state (once) and wake whoever waits for it."""
        if handle.status in TERMINAL:
            return
        handle.status = status
        handle.outcome = status  # type: ignore[assignment]  # a terminal status is a RunOutcome
        final = await self.record_finish(handle, status, result, reason)
        self._wake(handle.run_id, final)

    async def park(self, handle: RunHandle, request: dict[str, Any]) -> None:
        handle.status = "waiting_human"
        handle.outcome = "parked"
        handle.steps = None  # a waiting run keeps nothing but its handle
        self.emit(handle, "human.requested", request)
        self.driver.handle(self._human_requested(handle, request))

    def _human_requested(self, handle: RunHandle, request: dict[str, Any]) -> HumanRequested:
        seq = int(str(request["operation_id"]).rsplit(":", 1)[1])
        args_hash = request["args_hash"] if request["kind"] == "approval" else None
        deadline_s = self.driver.clock.now() + (int(request["deadline_ms"]) - self.now_ms()) / 1000
        row = handle.row
        return HumanRequested(
            row.run_id, request["operation_id"], seq, args_hash, deadline_s, row.parent_run_id, row.tenant_id
        )

    async def run_child(self, parent: RunHandle, seq: int, agent: str, text: str) -> RunRow:
        """Start (or find again, after a crash) the child run of `parent`'s step `seq`; wait for its end.

        Raises: NotFound (no such agent, or one the parent's tenant does not see).
        """
        child_id = f"{parent.run_id}.{seq}"
        tenant = parent.row.tenant_id
        waiter = self.waiter(child_id)
        row = await self.store.load_run(tenant, child_id)
        if row is not None and row.status in TERMINAL and child_id not in self.handles:
            return row
        if row is None:
            spec = self.agents.get(tenant, agent)
            await self.submit(tenant, spec, text, parent.row.session_id, child_id, parent=parent)
            self.emit(parent, "run.child_started", {"child_run_id": child_id, "agent": spec.name})
        return await waiter

    def waiter(self, run_id: str) -> asyncio.Future[RunRow]:
        """A future resolved with the run's final row when it finishes."""
        future: asyncio.Future[RunRow] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_id, []).append(future)
        return future

    def _wake(self, run_id: str, final: RunRow) -> None:
        for future in self._waiters.pop(run_id, []):
            if not future.done():
                future.set_result(final)

    # --- runs without a task ---

    def _on_finish(self, command: FinishRun) -> None:
        handle = self.handles.get(command.run_id)
        if handle is None or handle.status in TERMINAL:
            return
        handle.status = command.status
        self.emit(handle, f"run.{command.status}", {"status": command.status, "result": None, "reason": command.reason})
        self.handles.pop(handle.run_id, None)
        writes = self.journal.end_run(handle.run_id, command.status, self.now_ms(), reason=command.reason)
        self.store.write_nowait(writes, run=handle.run_id)
        self.store.release(handle.run_id)
        log.info("run %s %s: %s", handle.run_id, command.status, command.reason)
        self.traces.ended(handle.row, command.status, command.reason, self.now_ms())
        self._wake(handle.run_id, _final(handle.row, command.status, command.reason))

    def _on_expire(self, command: ExpireHuman) -> None:
        handle = self.handles.get(command.run_id)
        if handle is None:  # a waiting run always has a handle; nothing to journal without one
            return
        output = {"timed_out": True}
        tenant = handle.row.tenant_id
        ops = self.journal.finish_step(tenant, command.run_id, command.step_seq, "done", output, self.now_ms())
        self.store.write_nowait(ops, run=command.run_id)

    # --- recovery ---

    async def recover(self) -> int:
        """Give every unfinished run found in the journal a handle and tell the kernel about it:
        a waiting run waits again (its deadline armed), the others resume.

        Returns:
            how many runs were found unfinished.
        """
        rows = await self.store.open_runs()
        for row in rows:
            if row.run_id not in self.handles:
                await self.recover_one(row)
        return len(rows)

    async def recover_one(self, row: RunRow) -> None:
        # The steps are read before the handle is registered, and nothing is awaited between its
        # registration and the kernel's hearing of the wait: an answer in between would find a
        # run this node owns but the kernel does not hold waiting, and be refused `not_waiting`.
        steps = await self.store.load_steps(row.tenant_id, row.run_id)
        try:
            handle = await self.load_handle(row)
        except Exception as exc:  # a broken snapshot must not stop the others from resuming
            log.exception("run %s cannot resume", row.run_id)
            stub = RunHandle(row=row, spec=AgentSpec(name=row.agent), status=row.status, next_event_seq=1)
            stub.next_event_seq = 1 + await self.store.last_event_seq(row.run_id)
            await self.record_finish(stub, "failed", None, f"cannot resume: {type(exc).__name__}")
            return
        last = steps[-1] if steps else None
        if row.status == "waiting_human" and last is not None and last.kind == "human" and last.status == "waiting":
            self.driver.handle(self._human_requested(handle, last.input))
            return
        if row.status == "running":
            self.emit(handle, "run.resumed", {"agent": row.agent})
        self.driver.handle(RunResumed(row.run_id, row.parent_run_id, row.tenant_id))


def _final(row: RunRow, status: str, reason: str) -> RunRow:
    return replace(row, status=status, reason=reason)
