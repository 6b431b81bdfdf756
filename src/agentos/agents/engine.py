"""The run engine: the handles of unfinished runs, their tasks, and what the loop calls.

Theory of operation. A run is a row in `runs` plus its journaled steps. While it works it has
a `RunHandle` with one task (`Runner.drive`); when it waits for a human the task ends and
only the small handle remains. The task changes the state only by finishing or parking, and
sets `handle.status` before its first await so a concurrent terminate sees the truth.

Every event of a run except `token` is journaled (in the one ordered write queue, without
waiting, or in the very write of its step: a model call's `model.started` and `model.completed`)
and then published to live subscribers (`Fanout`), with its time `at_ms`. Token events are
live-only: the model step's reply, journaled when the call ends, holds the text, and one journal
row per streamed token would be the largest write load of the server for nothing a replay needs.

Model calls take a provider permit from the kernel (`permit`), owned by the run, and give it
back when the stream closes: a run waiting for a human holds none.

Tenancy: a run belongs to the tenant on its row, and everything it writes carries that tenant.
`handle(tenant_id, run_id)`, the way in for requests, answers NotFound for another tenant's run
whether it is in memory or only in the journal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agentos.agents.fanout import Fanout, RunEvent
from agentos.agents.handle import RunHandle
from agentos.agents.host import ToolHub
from agentos.agents.traces import RunTraces
from agentos.config.agents import AgentSpec, parse_agent_spec, spec_to_dict
from agentos.errors import NotFound
from agentos.ids import new_id
from agentos.journal.journal import TERMINAL, Journal, RunRow
from agentos.journal.store import JournalStore
from agentos.kernel import DEFAULT_TENANT
from agentos.providers.base import Message, Provider
from agentos.runtime.driver import Driver
from agentos.sandbox.sandbox import Sandbox
from agentos.telemetry import NO_TRACING, Tracing

if TYPE_CHECKING:
    from agentos.knowledge.service import KnowledgeService

log = logging.getLogger("agentos.agents")


def run_not_found(run_id: str) -> NotFound:
    return NotFound(f"run {run_id!r} not found", code="run_not_found")


_WATCHED = ("run.", "human.")


class RunEngine:
    """What `Runner` calls (the `RunHost` protocol), and the handles of unfinished runs."""

    def __init__(
        self,
        *,
        store: JournalStore,
        journal: Journal,
        provider: Provider,
        sandbox: Sandbox,
        mcp: ToolHub,
        driver: Driver,
        now_ms: Callable[[], int],
        on_usage: Callable[[str, int], None] | None = None,
        knowledge: KnowledgeService | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.traces = RunTraces(tracing)
        self.store = store
        self.journal = journal
        self.provider = provider
        self.sandbox = sandbox
        self.mcp = mcp
        self.knowledge = knowledge
        self.fanout = Fanout()
        # Called with (tenant_id, run_id, type, data) for every journaled `run.*` and `human.*`
        # event of the runs this node drives: the console's live inbox and run list.
        self.watchers: list[Callable[[str, str, str, dict[str, Any]], None]] = []
        self.handles: dict[str, RunHandle] = {}
        self.workspaces: Path | None = None
        self.closing = False
        self._driver = driver
        self._now_ms = now_ms
        self._on_usage = on_usage  # (tenant_id, tokens): the tenant's tokens-per-day quota
        self._specs: dict[str, AgentSpec] = {}  # by snapshot hash: waiting runs share their agent's spec
        self._load_lock = asyncio.Lock()

    # --- RunHost ---

    @property
    def suspending(self) -> bool:
        """True while closing: runs stop at their next step boundary, still unfinished."""
        return self.closing

    def now_ms(self) -> int:
        return self._now_ms()

    def emit(
        self,
        handle: RunHandle,
        event_type: str,
        data: dict[str, Any],
        *,
        into: list[Any] | None = None,
        held: list[Callable[[], None]] | None = None,
    ) -> None:
        """Journal the event (its time is the row's `created_ms`, shown as `at_ms`) and publish it.

        `into`: the writes of the step the event belongs to, which the caller queues next,
        before it awaits anything (so events still commit in seq order): the event commits with
        its step, in the same transaction, instead of in a write of its own. `held`: the
        publishing is added there for the caller to do once those writes committed, so no
        subscriber hears of an event a crash could still take back (and its seq reuse).
        """
        if event_type == "token":  # live-only, see the module docstring
            self.fanout.publish(handle.run_id, RunEvent(handle.next_event_seq - 1, event_type, data))
            return
        seq = handle.next_event_seq
        handle.next_event_seq += 1
        encoded = msgspec.json.encode(data).decode()
        now = self.now_ms()
        tenant = handle.row.tenant_id
        event = self.journal.event(tenant, handle.run_id, seq, event_type, encoded, now)
        if into is None:
            self.store.write_nowait([event], run=handle.run_id)
        else:
            into.append(event)
        publish = partial(self._publish, tenant, handle.run_id, RunEvent(seq, event_type, {**data, "at_ms": now}))
        if held is None:
            publish()
        else:
            held.append(publish)

    def _publish(self, tenant_id: str, run_id: str, event: RunEvent) -> None:
        self.fanout.publish(run_id, event)
        if event.type.startswith(_WATCHED):
            for watcher in self.watchers:
                watcher(tenant_id, run_id, event.type, event.data)

    def spent(self, handle: RunHandle, usage: dict[str, int]) -> None:
        """A model call of the run finished with this usage (prompt and completion tokens)."""
        if self._on_usage is not None:
            self._on_usage(handle.row.tenant_id, usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))

    def workdir(self, run_id: str) -> Path:
        assert self.workspaces is not None, "service not started"
        return self.workspaces / run_id

    @asynccontextmanager
    async def permit(self, run_id: str) -> AsyncIterator[None]:
        """Hold one of the kernel's provider permits for a model call of `run_id`.

        Raises:
            ProviderLimitTimeout: none was free within `kernel.permit_wait_timeout_s`.
        """
        stream_id = new_id("stream")
        handle = self.handles.get(run_id)
        tenant_id = handle.row.tenant_id if handle is not None else DEFAULT_TENANT
        if self.traces.on:
            with self.traces.in_run(run_id, "agentos.provider_permit", {"agentos.tenant.id": tenant_id}):
                await self._driver.acquire_permit(stream_id, owner=run_id, tenant_id=tenant_id)
        else:
            await self._driver.acquire_permit(stream_id, owner=run_id, tenant_id=tenant_id)
        try:
            yield
        finally:
            self._driver.release_permit(stream_id)

    # --- handles ---

    def new_handle(self, row: RunRow, spec: AgentSpec, context: list[Message] | None) -> RunHandle:
        handle = RunHandle(row=row, spec=spec, status=row.status, next_event_seq=1, steps=[], context=context or [])
        self.handles[row.run_id] = handle
        return handle

    async def handle(self, tenant_id: str, run_id: str) -> RunHandle | None:
        """The tenant's run's handle, loaded if needed; None when the run is finished.

        Raises: NotFound (also for another tenant's run).
        """
        handle = self._owned(tenant_id, run_id)
        if handle is not None:
            return handle
        async with self._load_lock:
            handle = self._owned(tenant_id, run_id)
            if handle is not None:
                return handle
            row = await self.store.load_run(tenant_id, run_id)
            if row is None:
                raise run_not_found(run_id)
            return None if row.status in TERMINAL else await self.load_handle(row)

    def _owned(self, tenant_id: str, run_id: str) -> RunHandle | None:
        handle = self.handles.get(run_id)
        if handle is not None and handle.row.tenant_id != tenant_id:
            raise run_not_found(run_id)  # exactly as a run that does not exist
        return handle

    def spec_of(self, spec_ref: str, spec_data: Any) -> AgentSpec:
        """The run's spec snapshot, parsed once per snapshot (runs of an agent share it)."""
        spec = self._specs.get(spec_ref)
        if spec is None:
            spec = self._specs[spec_ref] = parse_agent_spec(spec_data)
        return spec

    async def load_handle(self, row: RunRow) -> RunHandle:
        spec_data, last_seq, context = await self.store.resume_state(row)
        spec = self.spec_of(row.spec_ref, spec_data)
        handle = RunHandle(
            row=row, spec=spec, status=row.status, next_event_seq=last_seq + 1, context=list(context or [])
        )
        self.handles[row.run_id] = handle
        return handle

    async def run_view(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        """The run's row as a client sees it: this node's live status if it drives the run, the
        pending human request while it waits, and its trace's id and link when tracing is on
        (`RunTraces.view`). Raises: NotFound (also for another tenant's run)."""
        row = await self.store.load_run(tenant_id, run_id)
        if row is None:
            raise run_not_found(run_id)
        steps = await self.store.load_steps(tenant_id, run_id) if row.status == "waiting_human" else []
        info = row.to_dict()
        handle = self.handles.get(run_id)
        if handle is not None:
            info["status"] = handle.status
        pending = steps[-1] if steps else None
        if info["status"] == "waiting_human" and pending is not None and pending.status == "waiting":
            info["pending"] = pending.input
        info.update(self.traces.view(run_id))
        return info

    def children(self, run_id: str) -> list[RunHandle]:
        return [h for h in self.handles.values() if h.row.parent_run_id == run_id]

    # --- the journal ---

    def payloads(
        self, tenant_id: str, spec: AgentSpec, context: list[Message] | None
    ) -> tuple[str, str | None, list[Any]]:
        """The refs of a new run's spec and context payloads (None: no context), and the writes
        that store them (before the run's row)."""
        spec_ref, put_spec = self.journal.payload(tenant_id, spec_to_dict(spec))
        if not context:
            return spec_ref, None, [put_spec]
        context_ref, put_context = self.journal.payload(tenant_id, context)
        return spec_ref, context_ref, [put_spec, put_context]

    async def record_finish(self, handle: RunHandle, status: str, result: str | None, reason: str) -> RunRow:
        """Journal the terminal state; the caller has set `handle.status` already."""
        self.emit(handle, f"run.{status}", {"status": status, "result": result, "reason": reason})
        self.handles.pop(handle.run_id, None)
        writes = self.journal.end_run(handle.run_id, status, self.now_ms(), result=result, reason=reason)
        await self.store.write(writes, run=handle.run_id)
        self.store.release(handle.run_id)
        log.info("run %s %s: %s", handle.run_id, status, reason)
        self.traces.ended(handle.row, status, reason, self.now_ms())
        return replace(handle.row, status=status, result=result, reason=reason)

    async def child_exists(self, parent: RunHandle, child_run_id: str) -> bool:
        tenant = parent.row.tenant_id
        return await self.store.load_run(tenant, child_run_id) is not None

    async def count_children(self, run_id: str) -> int:
        return await self.store.count_children(run_id)

    # --- events ---

    async def events(
        self, tenant_id: str, run_id: str, handle: RunHandle | None, after_seq: int
    ) -> AsyncIterator[RunEvent]:
        """Stored events after `after_seq`, then live ones, until the terminal event. The caller
        checked that the run is the tenant's (`handle`)."""
        last = after_seq
        while True:
            # Not running here: another node's, over the bus (or finished: the journal ends it).
            subscription = await self.fanout.follow(run_id, local=handle is not None)
            try:  # subscribed before reading the journal: nothing falls between the two
                for row in await self.store.load_events(tenant_id, run_id, last):
                    last = row.seq
                    yield RunEvent(row.seq, row.type, row.payload())
                    if row.type.startswith("run.") and row.type[4:] in TERMINAL:
                        return
                if subscription is None:
                    return
                while (event := await subscription.get()) is not None:
                    if event.type == "token" or event.seq > last:
                        last = max(last, event.seq)
                        yield event
                        if event.type.startswith("run.") and event.type[4:] in TERMINAL:
                            return
                # The subscriber fell behind its bound: catch up from the journal.
            finally:
                if subscription is not None:
                    self.fanout.unsubscribe(run_id, subscription)
