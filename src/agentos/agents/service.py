"""`RunService`: agents and their runs, the object the HTTP layer calls.

Theory of operation. A run is a row in `runs` plus its journaled steps. While it works it has
a `RunHandle` with one task (`Runner.drive`); when it waits for a human the task ends and
only the small handle and one entry in the shared `Deadlines` heap remain. Answering,
cancelling and terminating take the handle's lock, so they never race each other; the task
itself changes the state only by finishing or parking, and sets `handle.status` before its
first await so a concurrent terminate sees the truth. `recover()` (part of `start()`) gives
every unfinished run found in the journal a handle and resumes the active ones.

Usage::

    service = RunService(provider, data_dir=Path("data"), settings=settings)
    await service.start()
    run_id = await service.start_run("ops", "clean the logs")
    async for event in service.events(run_id): ...
    await service.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from agentos.agents.agents import AgentRegistry
from agentos.agents.deadlines import Deadlines
from agentos.agents.handle import TERMINAL_EVENTS, RunEvent, RunHandle
from agentos.agents.journal import SCHEMA, TERMINAL, Journal, RunRow, Step, migrate
from agentos.agents.mcp_tools import McpHub
from agentos.agents.runner import Runner, ToolHub
from agentos.agents.sandbox import Sandbox
from agentos.agents.spec import AgentSpec, parse_agent_spec, spec_to_dict
from agentos.agents.store import RunStore
from agentos.clock import wall_ms
from agentos.config import Settings
from agentos.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from agentos.providers.base import Message, Provider

log = logging.getLogger(__name__)

_ANSWER_KINDS = ("question", "approval", "uncertain")


@dataclass(frozen=True, slots=True)
class RunServiceStatistics:
    active_runs: int  # runs with a task
    waiting_runs: int  # runs parked on a human (no task)
    handles: int
    pending_deadlines: int


class RunService:
    def __init__(
        self,
        provider: Provider,
        data_dir: Path | None,
        settings: Settings,
        *,
        tenant_id: str = "default",
        max_active_runs: int = 1024,
        workspace_dir: Path | None = None,
        mcp: ToolHub | None = None,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        """Args:
        provider: the chat model every agent talks to.
        data_dir: where `runs.db` and the run workspaces live; None keeps the journal in memory.
        settings: `settings.agents` defines the config agents; `kernel.max_input_chars` bounds input.
        max_active_runs: runs with a task at once (children and resumed waits do not queue).
        """
        self.provider = provider
        self.journal = Journal(tenant_id)
        self.store = RunStore(data_dir / "runs.db" if data_dir else None, schema=SCHEMA, migrate=migrate)
        self.sandbox = Sandbox()
        self.mcp: ToolHub = mcp or McpHub()
        self.now_ms = now_ms
        self._settings = settings
        self._workspaces = workspace_dir or (data_dir / "workspaces" if data_dir else None)
        self._temporary_workspaces: Path | None = None
        self._agents = AgentRegistry(self.store, self.journal, settings.agents)
        self._runner = Runner(self)
        self._deadlines = Deadlines(self._expire, now_ms)
        self._slots = asyncio.Semaphore(max_active_runs)
        self._handles: dict[str, RunHandle] = {}
        self._specs: dict[str, AgentSpec] = {}  # by snapshot hash: waiting runs share their agent's spec
        self._load_lock = asyncio.Lock()
        self._waiters: dict[str, list[asyncio.Future[RunRow]]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False

    # --- life cycle ---

    async def start(self) -> None:
        """Open the journal, load agents, resume unfinished runs."""
        if self._workspaces is None:  # an in-memory journal: its workspaces go when it goes
            self._workspaces = self._temporary_workspaces = Path(tempfile.mkdtemp(prefix="agentos-workspaces-"))
        await self.store.open()
        await self._agents.load()
        self._deadlines.start()
        await self.recover()

    async def recover(self) -> int:
        """Give every unfinished run a handle again; resume those not waiting for a human.

        Returns:
            how many runs were found unfinished.
        """
        rows = await self.store.read(self.journal.open_runs)
        for row in rows:
            if row.run_id not in self._handles:
                await self._recover_one(row)
        return len(rows)

    async def close(self, drain_s: float = 5.0) -> None:
        """Stop; unfinished runs stay in the journal and resume at the next start.

        Working runs first get up to `drain_s` to reach the end of their current step (so that
        no tool call is left uncertain); those still busy then are cancelled.
        """
        self._closing = True
        await self._deadlines.close()
        tasks = [h.task for h in self._handles.values() if h.task is not None]
        if tasks and drain_s > 0:
            await asyncio.wait(tasks, timeout=drain_s)
        tasks += list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if isinstance(self.mcp, McpHub):
            await self.mcp.close()
        await self.sandbox.close()
        await self.store.close()
        if self._temporary_workspaces is not None:
            await asyncio.to_thread(shutil.rmtree, self._temporary_workspaces, True)

    @property
    def suspending(self) -> bool:
        """True while closing: runs stop at their next step boundary, still unfinished."""
        return self._closing

    def statistics(self) -> RunServiceStatistics:
        handles = list(self._handles.values())
        return RunServiceStatistics(
            active_runs=sum(h.task is not None for h in handles),
            waiting_runs=sum(h.status == "waiting_human" and h.task is None for h in handles),
            handles=len(handles),
            pending_deadlines=self._deadlines.statistics().pending,
        )

    # --- agents ---

    async def create_agent(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Raises: InvalidInput, Conflict."""
        return self._agent_dict(await self._agents.create(body, self.now_ms()))

    def list_agents(self) -> list[dict[str, Any]]:
        return [self._agent_dict(spec) for spec in self._agents.list()]

    def has_agent(self, name: str) -> bool:
        try:
            self._agents.get(name)
        except NotFound:
            return False
        return True

    def get_agent(self, name: str) -> dict[str, Any]:
        """Raises: NotFound."""
        return self._agent_dict(self._agents.get(name))

    def _agent_dict(self, spec: AgentSpec) -> dict[str, Any]:
        return {**spec_to_dict(spec), "source": self._agents.source(spec.name)}

    # --- runs ---

    async def start_run(
        self, agent: str, text: str, session_id: str | None = None, *, context: list[Message] | None = None
    ) -> str:
        """Start a run in the background and return its id. `context`: earlier messages (a
        session's transcript) the model sees before `text`; journaled with the run.

        Raises:
            NotFound: no such agent.
            InvalidInput: empty input.
            PayloadTooLarge: input over `kernel.max_input_chars`.
        """
        spec = self._agents.get(agent)
        _check_input(text, self._settings.kernel.max_input_chars)
        run_id = f"run_{uuid.uuid4().hex[:20]}"
        handle = await self._create_run(spec, text, session_id, parent=None, run_id=run_id, context=context)
        self._activate(handle, queued=True)
        return handle.run_id

    async def get_run(self, run_id: str) -> dict[str, Any]:
        """The run's row, plus the pending human request when it waits for one.

        Raises: NotFound.
        """
        row, steps = await self.store.read(lambda db: self._row_and_steps(db, run_id))
        info = row.to_dict()
        handle = self._handles.get(run_id)
        if handle is not None:
            info["status"] = handle.status
        pending = steps[-1] if steps else None
        if info["status"] == "waiting_human" and pending is not None and pending.status == "waiting":
            info["pending"] = pending.input
        return info

    def _row_and_steps(self, db: Any, run_id: str) -> tuple[RunRow, list[Step]]:
        row = self.journal.load_run(db, run_id)
        if row is None:
            raise NotFound(f"run {run_id!r} not found", code="run_not_found")
        steps = self.journal.load_steps(db, run_id) if row.status == "waiting_human" else []
        return row, steps

    async def events(self, run_id: str, after_seq: int = 0) -> AsyncGenerator[RunEvent, None]:
        """Every event of the run after `after_seq`, stored then live, ending with the terminal one.

        Raises: NotFound (before the first event).
        """
        handle = await self._handle(run_id)
        queue: asyncio.Queue[RunEvent] = asyncio.Queue()
        if handle is not None:
            handle.subscribers.append(queue)  # before reading the stored ones: nothing falls between
        try:
            last = after_seq
            for row in await self.store.read(lambda db: self.journal.load_events(db, run_id, after_seq)):
                last = row.seq
                yield RunEvent(row.seq, row.type, msgspec.json.decode(row.data))
                if row.type in TERMINAL_EVENTS:
                    return
            while handle is not None:
                event = await queue.get()
                if event.seq > last:
                    last = event.seq
                    yield event
                    if event.type in TERMINAL_EVENTS:
                        return
        finally:
            if handle is not None:
                with contextlib.suppress(ValueError):
                    handle.subscribers.remove(queue)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Soft cancel: a working run stops before its next step; a waiting or queued one at once.

        Raises: NotFound.
        """
        handle = await self._handle(run_id)
        if handle is not None:
            async with handle.lock:
                await self._cancel_locked(handle)
        return await self.get_run(run_id)

    async def _cancel_locked(self, handle: RunHandle) -> None:
        if handle.status in TERMINAL:
            return
        for child in self._children(handle.run_id):
            self._spawn(self.cancel(child.run_id))
        if handle.task is not None and handle.status == "running":
            handle.cancel_requested = True
            return
        await self._stop_task(handle)
        await self.finish(handle, "cancelled", reason="cancelled")

    async def terminate(self, run_id: str) -> dict[str, Any]:
        """Hard stop in any state: the task is cancelled and `run.cancelled` recorded here.

        Raises: NotFound.
        """
        handle = await self._handle(run_id)
        if handle is not None:
            async with handle.lock:
                await self._stop_task(handle)
                await self.finish(handle, "cancelled", reason="terminated")
        return await self.get_run(run_id)

    async def _stop_task(self, handle: RunHandle) -> None:
        task = handle.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def answer(
        self, run_id: str, operation_id: str, answer: str = "", *, approve: bool | None = None,
        args_hash: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Answer the human request `operation_id` and resume the run.

        Raises:
            NotFound: no such run.
            Conflict: the run does not wait for that operation, or `args_hash` is not the hash of
                the arguments awaiting approval.
            InvalidInput: an approval without `approve` or `args_hash`; an uncertain step answered
                with something else than "retry" or "skip".
        """
        handle = await self._handle(run_id)
        if handle is None:
            raise Conflict(f"run {run_id!r} is finished and awaits no answer", code="not_waiting")
        async with handle.lock:
            step = await self._pending_step(handle, operation_id)
            output = _check_answer(step.input, answer, approve, args_hash)
            await self._record_answer(handle, step, output)
        return await self.get_run(run_id)

    async def _pending_step(self, handle: RunHandle, operation_id: str) -> Step:
        if handle.status != "waiting_human" or handle.task is not None:
            raise Conflict(f"run {handle.run_id!r} is {handle.status}, not waiting for a human", code="not_waiting")
        steps = await self.store.read(lambda db: self.journal.load_steps(db, handle.run_id))
        step = steps[-1] if steps else None
        if step is None or step.kind != "human" or step.status != "waiting":
            raise Conflict(f"run {handle.run_id!r} has no pending human request", code="not_waiting")
        if step.operation_id != operation_id:
            raise Conflict(
                f"operation {operation_id!r} is not awaiting an answer (pending: {step.operation_id!r})",
                code="operation_mismatch",
            )
        handle.steps = steps
        return step

    async def _record_answer(self, handle: RunHandle, step: Step, output: dict[str, Any]) -> None:
        now = self.now_ms()
        ops = self.journal.finish_step(handle.run_id, step.seq, "done", output, now)
        ops.append(self.journal.set_status(handle.run_id, "running", now))
        await self.store.write(ops)
        handle.record(replace(step, status="done", output=output))
        handle.status = "running"
        self.emit(handle, "human.answered", {"operation_id": step.operation_id, "kind": step.input["kind"], **output})
        self._activate(handle, queued=False)

    # --- RunHost: what the runner calls ---

    def emit(self, handle: RunHandle, event_type: str, data: dict[str, Any]) -> None:
        seq = handle.next_event_seq
        handle.next_event_seq += 1
        handle.publish(RunEvent(seq, event_type, data))
        encoded = msgspec.json.encode(data).decode()
        self.store.write_nowait([self.journal.event(handle.run_id, seq, event_type, encoded, self.now_ms())])

    def workdir(self, run_id: str) -> Path:
        assert self._workspaces is not None, "service not started"
        return self._workspaces / run_id

    async def finish(self, handle: RunHandle, status: str, *, result: str | None = None, reason: str) -> None:
        """Record the run's terminal state (once) and wake whoever waits for it."""
        if handle.status in TERMINAL:
            return
        handle.status = status
        self.emit(handle, f"run.{status}", {"status": status, "result": result, "reason": reason})
        self._handles.pop(handle.run_id, None)
        final = replace(handle.row, status=status, result=result, reason=reason)
        for future in self._waiters.pop(handle.run_id, []):
            if not future.done():
                future.set_result(final)
        if status != "completed":
            for child in self._children(handle.run_id):
                self._spawn(self.terminate(child.run_id))
        await self.store.write([self.journal.set_status(handle.run_id, status, self.now_ms(), result=result,
                                                        reason=reason)])  # fmt: skip
        log.info("run %s %s: %s", handle.run_id, status, reason)

    async def park(self, handle: RunHandle, request: dict[str, Any]) -> None:
        handle.status = "waiting_human"
        handle.steps = None  # a waiting run keeps nothing but its handle
        self.emit(handle, "human.requested", request)
        self._deadlines.add(request["deadline_ms"], handle.run_id, request["operation_id"])

    async def run_child(self, parent: RunHandle, seq: int, agent: str, text: str) -> RunRow:
        """Start (or find again, after a crash) the child run of `parent`'s step `seq`; wait for its end."""
        child_id = f"{parent.run_id}.{seq}"
        waiter: asyncio.Future[RunRow] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(child_id, []).append(waiter)
        row = await self.store.read(lambda db: self.journal.load_run(db, child_id))
        if row is not None and row.status in TERMINAL and child_id not in self._handles:
            return row
        if row is None:
            spec = self._agents.get(agent)
            child = await self._create_run(spec, text, parent.row.session_id, parent=parent, run_id=child_id)
            self.emit(parent, "run.child_started", {"child_run_id": child_id, "agent": spec.name})
            self._activate(child, queued=True)
        return await waiter

    async def child_exists(self, child_run_id: str) -> bool:
        return await self.store.read(lambda db: self.journal.load_run(db, child_run_id)) is not None

    async def count_children(self, run_id: str) -> int:
        return await self.store.read(lambda db: self.journal.count_children(db, run_id))

    # --- internals ---

    async def _create_run(
        self,
        spec: AgentSpec,
        text: str,
        session_id: str | None,
        *,
        parent: RunHandle | None,
        run_id: str,
        context: list[Message] | None = None,
    ) -> RunHandle:
        now = self.now_ms()
        spec_ref, put_spec = self.journal.payload(spec_to_dict(spec))
        writes = [put_spec]
        context_ref = None
        if context:
            context_ref, put_context = self.journal.payload(context)
            writes.append(put_context)
        row = RunRow(
            run_id, self.journal.tenant_id, spec.name, session_id, parent.run_id if parent else None,
            parent.row.depth + 1 if parent else 0, spec_ref, text, "queued", None, None, now, now, context_ref,
        )  # fmt: skip
        await self.store.write([*writes, self.journal.insert_run(row)])
        handle = RunHandle(row=row, spec=spec, status="queued", next_event_seq=1, steps=[], context=context or [])
        self._handles[run_id] = handle
        return handle

    def _activate(self, handle: RunHandle, *, queued: bool) -> None:
        if self._closing:
            return
        handle.task = asyncio.create_task(self._drive(handle, queued), name=f"run-{handle.run_id}")

    async def _drive(self, handle: RunHandle, queued: bool) -> None:
        try:
            if queued and handle.row.parent_run_id is None:
                async with self._slots:
                    await self._work(handle, queued)
            else:
                await self._work(handle, queued)
        except Exception as exc:  # a bug must end this run with a reason, not hang it
            log.exception("run %s failed", handle.run_id)
            await self.finish(handle, "failed", reason=f"internal: {type(exc).__name__}: {exc}")
        finally:
            if asyncio.current_task() is handle.task:
                handle.task = None

    async def _work(self, handle: RunHandle, queued: bool) -> None:
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

    async def _handle(self, run_id: str) -> RunHandle | None:
        """The run's handle, loaded if needed; None when the run is finished.

        Raises: NotFound.
        """
        handle = self._handles.get(run_id)
        if handle is not None:
            return handle
        async with self._load_lock:
            handle = self._handles.get(run_id)
            if handle is not None:
                return handle
            row = await self.store.read(lambda db: self.journal.load_run(db, run_id))
            if row is None:
                raise NotFound(f"run {run_id!r} not found", code="run_not_found")
            return None if row.status in TERMINAL else await self._load_handle(row)

    async def _load_handle(self, row: RunRow) -> RunHandle:
        def read(db: Any) -> tuple[Any, int, Any]:
            context = self.journal.load_payload(db, row.context_ref) if row.context_ref else None
            return self.journal.load_payload(db, row.spec_ref), self.journal.last_event_seq(db, row.run_id), context

        spec = self._specs.get(row.spec_ref)
        spec_data, last_seq, context = await self.store.read(read)
        if spec is None:
            spec = self._specs[row.spec_ref] = parse_agent_spec(spec_data)
        handle = RunHandle(
            row=row, spec=spec, status=row.status, next_event_seq=last_seq + 1, context=list(context or [])
        )
        self._handles[row.run_id] = handle
        return handle

    async def _recover_one(self, row: RunRow) -> None:
        try:
            handle = await self._load_handle(row)
        except Exception as exc:  # a broken snapshot must not stop the others from resuming
            log.exception("run %s cannot resume", row.run_id)
            stub = RunHandle(row=row, spec=AgentSpec(name=row.agent), status=row.status, next_event_seq=1)
            stub.next_event_seq = 1 + await self.store.read(lambda db: self.journal.last_event_seq(db, row.run_id))
            await self.finish(stub, "failed", reason=f"cannot resume: {type(exc).__name__}: {exc}")
            return
        if row.status != "waiting_human":
            if row.status == "running":
                self.emit(handle, "run.resumed", {"agent": row.agent})
            self._activate(handle, queued=False)
            return
        steps = await self.store.read(lambda db: self.journal.load_steps(db, row.run_id))
        last = steps[-1] if steps else None
        if last is not None and last.kind == "human" and last.status == "waiting":
            self._deadlines.add(last.input["deadline_ms"], row.run_id, last.operation_id)
        else:
            self._activate(handle, queued=False)

    async def _expire(self, run_id: str, operation_id: str) -> None:
        handle = self._handles.get(run_id)
        if handle is None:
            return
        async with handle.lock:
            if handle.status != "waiting_human" or handle.task is not None:
                return
            steps = await self.store.read(lambda db: self.journal.load_steps(db, run_id))
            step = steps[-1] if steps else None
            if step is None or step.operation_id != operation_id or step.status != "waiting":
                return
            await self.store.write(self.journal.finish_step(run_id, step.seq, "done", {"timed_out": True},
                                                            self.now_ms()))  # fmt: skip
            timeout_s = handle.spec.human_timeout_s
            reason = f"human_timeout: no answer to {operation_id!r} within {timeout_s:g}s"
            await self.finish(handle, "failed", reason=reason)

    def _children(self, run_id: str) -> list[RunHandle]:
        return [h for h in self._handles.values() if h.row.parent_run_id == run_id]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _check_input(text: object, max_chars: int) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("input must be a non-empty string")
    if len(text) > max_chars:
        raise PayloadTooLarge(f"input is {len(text)} characters, over the limit of {max_chars}")


def _check_answer(request: dict[str, Any], answer: str, approve: bool | None, args_hash: str | None) -> dict[str, Any]:
    kind = request["kind"]
    assert kind in _ANSWER_KINDS, kind
    if kind == "approval":
        if approve is None or args_hash is None:
            raise InvalidInput("an approval needs both 'approve' (true or false) and 'args_hash'")
        if args_hash != request["args_hash"]:
            raise Conflict("args_hash does not match the arguments awaiting approval", code="args_hash_mismatch")
    if kind == "uncertain" and answer not in ("retry", "skip"):
        raise InvalidInput("an uncertain step is answered with 'retry' or 'skip'")
    return {"answer": answer, "approve": approve}
