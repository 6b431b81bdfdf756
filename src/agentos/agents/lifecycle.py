"""The lifecycle of runs: start, park on a human, resume, cancel, terminate, finish, recover.

Answering, cancelling and terminating take the handle's lock, so they never race each other;
the run's own task changes the state only by finishing or parking.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from agentos.agents.agents import AgentRegistry
from agentos.agents.deadlines import Deadlines
from agentos.agents.engine import RunEngine
from agentos.agents.handle import RunHandle
from agentos.agents.journal import TERMINAL, RunRow, Step
from agentos.agents.runner import Runner
from agentos.agents.spec import AgentSpec
from agentos.errors import new_error_id
from agentos.providers.base import Message

log = logging.getLogger("agentos.agents")


class RunLifecycle(RunEngine):
    def __init__(self, *, agents: AgentRegistry, max_active_runs: int, **engine: Any) -> None:
        super().__init__(**engine)
        self.agents = agents
        self._runner = Runner(self)
        self._deadlines = Deadlines(self._expire, self.now_ms)
        self._slots = asyncio.Semaphore(max_active_runs)
        self._waiters: dict[str, list[asyncio.Future[RunRow]]] = {}
        self._background: set[asyncio.Task[Any]] = set()

    def start_timers(self) -> None:
        self._deadlines.start()

    async def stop(self, drain_s: float) -> None:
        """Suspend every run at its next step boundary (up to `drain_s`), then cancel the rest."""
        self.closing = True
        await self._deadlines.close()
        tasks = [h.task for h in self.handles.values() if h.task is not None]
        if tasks and drain_s > 0:
            await asyncio.wait(tasks, timeout=drain_s)
        tasks += list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def pending_deadlines(self) -> int:
        return self._deadlines.statistics().pending

    # --- starting ---

    async def create(
        self, spec: AgentSpec, text: str, session_id: str | None, run_id: str, *, parent: RunHandle | None = None,
        context: list[Message] | None = None,
    ) -> RunHandle:  # fmt: skip
        row = await self.insert_run(spec, text, session_id, run_id, parent, context)
        return self.new_handle(row, spec, context)

    def activate(self, handle: RunHandle, *, queued: bool) -> None:
        if self.closing:
            return
        handle.task = asyncio.create_task(self._drive(handle, queued), name=f"run-{handle.run_id}")

    async def _drive(self, handle: RunHandle, queued: bool) -> None:
        try:
            if queued and handle.row.parent_run_id is None:
                async with self._slots:
                    await self._work(handle)
            else:
                await self._work(handle)
        except Exception:  # a bug must end this run with a reason, not hang it
            error_id = new_error_id()
            log.exception("run %s failed (error_id=%s)", handle.run_id, error_id)
            await self.finish(handle, "failed", reason=f"internal_error: {error_id}")
        finally:
            if asyncio.current_task() is handle.task:
                handle.task = None

    async def _work(self, handle: RunHandle) -> None:
        if handle.cancel_requested:
            await self.finish(handle, "cancelled", reason="cancelled")
            return
        if handle.steps is None:
            handle.steps = await self.store.read(lambda db: self.journal.load_steps(db, handle.run_id))
        if handle.status == "queued":
            handle.status = "running"
            self.store.write_nowait([self.journal.set_status(handle.run_id, "running", self.now_ms())])
            if not handle.steps:
                self.emit(handle, "run.started", {"agent": handle.row.agent})
        await self._runner.drive(handle)

    # --- RunHost: what the runner calls ---

    async def finish(self, handle: RunHandle, status: str, *, result: str | None = None, reason: str) -> None:
        """Record the run's terminal state (once) and wake whoever waits for it."""
        if handle.status in TERMINAL:
            return
        handle.status = status
        final = await self.record_finish(handle, status, result, reason)
        for future in self._waiters.pop(handle.run_id, []):
            if not future.done():
                future.set_result(final)
        if status != "completed":
            for child in self.children(handle.run_id):
                self.spawn(self.terminate(child.run_id))

    async def park(self, handle: RunHandle, request: dict[str, Any]) -> None:
        handle.status = "waiting_human"
        handle.steps = None  # a waiting run keeps nothing but its handle
        self.emit(handle, "human.requested", request)
        self._deadlines.add(request["deadline_ms"], handle.run_id, request["operation_id"])

    async def run_child(self, parent: RunHandle, seq: int, agent: str, text: str) -> RunRow:
        """Start (or find again, after a crash) the child run of `parent`'s step `seq`; wait for its end.

        Raises: NotFound (no such agent).
        """
        child_id = f"{parent.run_id}.{seq}"
        waiter: asyncio.Future[RunRow] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(child_id, []).append(waiter)
        row = await self.store.read(lambda db: self.journal.load_run(db, child_id))
        if row is not None and row.status in TERMINAL and child_id not in self.handles:
            return row
        if row is None:
            spec = self.agents.get(agent)
            child = await self.create(spec, text, parent.row.session_id, child_id, parent=parent)
            self.emit(parent, "run.child_started", {"child_run_id": child_id, "agent": spec.name})
            self.activate(child, queued=True)
        return await waiter

    # --- cancel, terminate, answer ---

    async def cancel(self, run_id: str) -> None:
        """Soft cancel: a working run stops before its next step; a waiting or queued one at once.

        Raises: NotFound.
        """
        handle = await self.handle(run_id)
        if handle is None:
            return
        async with handle.lock:
            if handle.status in TERMINAL:
                return
            for child in self.children(handle.run_id):
                self.spawn(self.cancel(child.run_id))
            if handle.task is not None and handle.status == "running":
                handle.cancel_requested = True
                return
            await self._stop_task(handle)
            await self.finish(handle, "cancelled", reason="cancelled")

    async def terminate(self, run_id: str) -> None:
        """Hard stop in any state: the task is cancelled and `run.cancelled` recorded here.

        Raises: NotFound.
        """
        handle = await self.handle(run_id)
        if handle is not None:
            async with handle.lock:
                await self._stop_task(handle)
                await self.finish(handle, "cancelled", reason="terminated")

    async def _stop_task(self, handle: RunHandle) -> None:
        task = handle.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def pending_step(self, handle: RunHandle) -> Step | None:
        """The human step the run waits on, if it waits on one."""
        if handle.status != "waiting_human" or handle.task is not None:
            return None
        steps = await self.store.read(lambda db: self.journal.load_steps(db, handle.run_id))
        step = steps[-1] if steps else None
        if step is None or step.kind != "human" or step.status != "waiting":
            return None
        handle.steps = steps
        return step

    async def record_answer(self, handle: RunHandle, step: Step, output: dict[str, Any]) -> None:
        now = self.now_ms()
        ops = self.journal.finish_step(handle.run_id, step.seq, "done", output, now)
        ops.append(self.journal.set_status(handle.run_id, "running", now))
        await self.store.write(ops)
        handle.record(replace(step, status="done", output=output))
        handle.status = "running"
        self.emit(handle, "human.answered", {"operation_id": step.operation_id, "kind": step.input["kind"], **output})
        self.activate(handle, queued=False)

    async def _expire(self, run_id: str, operation_id: str) -> None:
        handle = self.handles.get(run_id)
        if handle is None:
            return
        async with handle.lock:
            step = await self.pending_step(handle)
            if step is None or step.operation_id != operation_id:
                return
            done = self.journal.finish_step(run_id, step.seq, "done", {"timed_out": True}, self.now_ms())
            await self.store.write(done)
            timeout_s = handle.spec.human_timeout_s
            reason = f"human_timeout: no answer to {operation_id!r} within {timeout_s:g}s"
            await self.finish(handle, "failed", reason=reason)

    # --- recovery ---

    async def recover(self) -> int:
        """Give every unfinished run a handle again; resume those not waiting for a human.

        Returns:
            how many runs were found unfinished.
        """
        rows = await self.store.read(self.journal.open_runs)
        for row in rows:
            if row.run_id not in self.handles:
                await self._recover_one(row)
        return len(rows)

    async def _recover_one(self, row: RunRow) -> None:
        try:
            handle = await self.load_handle(row)
        except Exception as exc:  # a broken snapshot must not stop the others from resuming
            log.exception("run %s cannot resume", row.run_id)
            stub = RunHandle(row=row, spec=AgentSpec(name=row.agent), status=row.status, next_event_seq=1)
            stub.next_event_seq = 1 + await self.store.read(lambda db: self.journal.last_event_seq(db, row.run_id))
            await self.finish(stub, "failed", reason=f"cannot resume: {type(exc).__name__}")
            return
        if row.status != "waiting_human":
            if row.status == "running":
                self.emit(handle, "run.resumed", {"agent": row.agent})
            self.activate(handle, queued=False)
            return
        steps = await self.store.read(lambda db: self.journal.load_steps(db, row.run_id))
        last = steps[-1] if steps else None
        if last is not None and last.kind == "human" and last.status == "waiting":
            self._deadlines.add(last.input["deadline_ms"], row.run_id, last.operation_id)
        else:
            self.activate(handle, queued=False)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
