"""`RunService`: agents and their runs, the object the HTTP layer and agent turns call.

It is built after the driver (`agentos.services.open_services`) and shares its kernel with
chat turns: its model calls take the kernel's provider permits. The engine (`RunEngine`:
handles, journal, events) and the lifecycle (`RunLifecycle`: start, park, resume, cancel,
finish, recover) live in their own modules; this one validates what callers send and answers
them.

Tenancy: every call names the caller's tenant first. A run, its events and its human requests,
and an API-defined agent, are one tenant's: another tenant's answers `run_not_found` /
`agent_not_found` (404) exactly like one that does not exist. Config agents are visible to
every tenant. Runs of every tenant share one journal, one kernel and one recovery. On
PostgreSQL several nodes share the runs (`agentos.agents.cluster`): a request for a run another
node drives is sent to that node. (Usage: `RunService(provider, data_dir, settings, driver=driver)`,
`await start()`, `await start_run("acme", "ops", "clean the logs")`, `events(...)`, `await close()`.)
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agentos.agents.agents import AgentRegistry
from agentos.agents.checks import remove_dirs
from agentos.agents.cluster import cluster_for
from agentos.agents.engine import run_not_found
from agentos.agents.fanout import Bridge, RunEvent
from agentos.agents.forks import ForkEdit
from agentos.agents.handle import Steer
from agentos.agents.host import ToolHub
from agentos.agents.interventions import apply_answer, terminate_here
from agentos.agents.lifecycle import RunLifecycle
from agentos.agents.policy import AgentPolicy
from agentos.agents.statistics import RunServiceStatistics, run_statistics
from agentos.config import Settings
from agentos.config.agents import AgentSpec
from agentos.errors import Conflict, InvalidInput, ShuttingDown
from agentos.ids import new_run_id
from agentos.journal.journal import Journal
from agentos.journal.run_list import RunQuery, next_cursor
from agentos.journal.store import JournalStore, open_journal_store
from agentos.kernel import OnBusy, RunCancelRequested
from agentos.mcp.tools import McpHub
from agentos.providers.base import Message, Provider
from agentos.runtime.driver import Driver
from agentos.runtime.turn import check_input
from agentos.sandbox.sandbox import Sandbox
from agentos.telemetry import NO_TRACING, Tracing

if TYPE_CHECKING:
    from agentos.knowledge.service import KnowledgeService


class RunService:
    def __init__(
        self,
        provider: Provider,
        data_dir: Path | None,
        settings: Settings,
        *,
        driver: Driver,
        workspace_dir: Path | None = None,
        mcp: ToolHub | None = None,
        now_ms: Callable[[], int] | None = None,
        on_usage: Callable[[str, int], None] | None = None,  # (tenant_id, tokens) after each model call
        knowledge: KnowledgeService | None = None,  # what the `search_knowledge` tool searches
        tracing: Tracing = NO_TRACING,  # runs' traces (agentos.agents.traces)
    ) -> None:
        """Args:
        provider: the chat model every agent talks to.
        data_dir: where `runs.db` (or, `store.backend = "postgres"`, nothing but the run
            workspaces) lives; None keeps the journal in memory.
        settings: `settings.agents` defines the config agents; `kernel.max_input_chars` bounds
            input; `kernel.max_active_runs` bounds the runs working at once.
        driver: the kernel's driver, shared with chat turns (`open_services` builds it; a test or a
            tool on its own: `agentos.testing.standalone_driver`).
        """
        store = open_journal_store(settings, data_dir)
        self._settings = settings
        self.knowledge = knowledge
        self._agents = AgentRegistry(store, store.journal, settings.agents, AgentPolicy.from_settings(settings))
        self._driver = driver
        self._runs = RunLifecycle(
            agents=self._agents,
            store=store,
            journal=store.journal,
            provider=provider,
            mcp=mcp
            or McpHub(
                trusted=self._agents.trusted_mcp_servers(),
                policy=self._agents.policy.outbound,
                connect_timeout_s=settings.kernel.mcp_connect_timeout_s,
                tracing=tracing,
            ),
            driver=driver,
            now_ms=now_ms or store.now_ms,  # the database's clock on PostgreSQL: nodes agree on deadlines
            on_usage=on_usage,
            sandbox=Sandbox(settings.sandbox),
            knowledge=knowledge,
            tracing=tracing,
        )
        self._cluster = cluster_for(store, self._runs, self)  # PostgreSQL: leases
        self._workspaces = workspace_dir or (data_dir / "workspaces" if data_dir else None)
        self._temporary_workspaces: Path | None = None
        self.accepting = True

    @property
    def sandbox(self) -> Sandbox:
        """`status()` for /readyz, `statistics()` for the metrics (`sandbox_metrics.py`)."""
        return self._runs.sandbox

    @property
    def store(self) -> JournalStore:
        return self._runs.store

    @property
    def journal(self) -> Journal:
        return self._runs.journal

    # --- life cycle ---

    async def start(self) -> None:
        """Open the journal, load agents, resume unfinished runs."""
        if self._workspaces is None:  # an in-memory journal: its workspaces go when it goes
            self._workspaces = self._temporary_workspaces = Path(tempfile.mkdtemp(prefix="agentos-workspaces-"))
            self._workspaces.chmod(0o711)  # a sandboxed command's own uid must reach its workspace
        self._runs.workspaces = self._workspaces
        await self._runs.sandbox.start()  # probes what the OS gives and logs the sandbox's mode
        await self.store.open()
        await self._agents.load()
        await self._agents.follow()
        await self._runs.recover()
        if self._cluster is not None:  # takes over the runs whose lease expired, renews its own
            await self._cluster.keeper.start()

    async def close(self, drain_s: float = 5.0) -> None:
        """Stop; unfinished runs stay in the journal and resume at the next start (on PostgreSQL,
        on another node at once). Working runs first get up to `drain_s` to reach the end of their
        current step (so that no tool call is left uncertain); those still busy then are cancelled.
        """
        self.accepting = False
        await self._runs.stop(drain_s)
        if self._cluster is not None:
            await self._cluster.keeper.close()
        if isinstance(self._runs.mcp, McpHub):
            await self._runs.mcp.close()
        await self._runs.sandbox.close()
        await self._agents.close()
        await self.store.close()
        if self._temporary_workspaces is not None:
            await asyncio.to_thread(shutil.rmtree, self._temporary_workspaces, True)

    def statistics(self) -> RunServiceStatistics:
        return run_statistics(self._driver.kernel, self._runs)

    def watch(self, watcher: Callable[[str, str, str, dict[str, Any]], None]) -> Callable[[], None]:
        """Call `watcher(tenant_id, run_id, type, data)` for every `run.*` and `human.*` event of
        the runs this node drives, from now on; returns the function that stops it. It runs on
        the event loop, inside the run's step: it must not block or raise."""
        self._runs.watchers.append(watcher)
        return lambda: self._runs.watchers.remove(watcher)

    def when_runs_free(self, listener: Callable[[str, int], None]) -> Callable[[], None]:
        """Call `listener(tenant_id, runs)` when `runs` of the tenant's runs on this node stop
        counting against `max_active_runs` (ended, or parked on a human); returns the function
        that stops it (`Driver.when_runs_free`)."""
        return self._driver.when_runs_free(listener)

    def bridge_events(self, bridge: Bridge) -> None:
        """Publish every run's events to other nodes, and follow their runs' (over the bus)."""
        self._runs.fanout.bridge(bridge)

    async def wait_no_subscribers(self, timeout_s: float) -> bool:
        """Wait until no client follows any run's events; False if some still did after `timeout_s`."""
        return await self._runs.fanout.wait_idle(timeout_s)

    # --- agents ---

    async def create_agent(
        self, tenant_id: str, body: Mapping[str, Any], *, caller_is_admin: bool = False
    ) -> dict[str, Any]:
        """Raises: InvalidInput, Forbidden (what only an administrator may define), Conflict."""
        spec = await self._agents.create(tenant_id, body, self._runs.now_ms(), caller_is_admin=caller_is_admin)
        return self._agents.as_dict(spec)

    async def sync_agents(self, tenant_id: str, *, only_changed: bool = False) -> None:
        """On PostgreSQL, read the tenant's agents again (another node may have made or replaced one);
        `only_changed`: only if it did since the last read, as far as this node heard. Raises: StoreUnavailable."""
        await self._agents.reload(tenant_id, only_changed=only_changed)

    async def sees_agent(self, tenant_id: str, name: str) -> bool:
        """Whether the tenant sees agent `name`; reads only after a change, or to be sure of a miss."""
        return await self._agents.sees(tenant_id, name)

    def list_agents(self, tenant_id: str) -> list[dict[str, Any]]:
        return [self._agents.as_dict(spec) for spec in self._agents.list(tenant_id)]

    def has_agent(self, tenant_id: str, name: str) -> bool:
        return self._agents.has(tenant_id, name)

    def agent_on_busy(self, tenant_id: str, name: str) -> OnBusy | None:
        if not self._agents.has(tenant_id, name):
            return None
        return self._agents.get(tenant_id, name).on_busy

    def get_agent(self, tenant_id: str, name: str) -> dict[str, Any]:
        """Raises: NotFound (also for another tenant's agent)."""
        return self._agents.as_dict(self._agents.get(tenant_id, name))

    # --- runs ---

    async def start_run(
        self,
        tenant_id: str,
        agent: str,
        text: str,
        session_id: str | None = None,
        *,
        context: list[Message] | None = None,
        run_id: str | None = None,
        max_cost: float | None = None,
        owner: str | None = None,
    ) -> str:
        """Start a run of `tenant_id` in the background and return its id. `context`: earlier
        messages (a session's transcript) the model sees before `text`; journaled with the run.
        `session_id` must be a session of the tenant: the caller checks it (the HTTP route,
        an agent turn). `run_id`: the id to give it (a trigger's delivery chose it when it was
        accepted); when the tenant already has a run of that id, nothing starts and that id
        is returned (a second start of the same delivery is a no-op). `max_cost`: this run's own
        budget, at most the agent's `max_cost` (kept with the run's spec, so a node that takes the
        run over applies it too).

        Raises:
            ShuttingDown: the server is draining.
            AdmissionRejected: over `kernel.max_active_runs`.
            NotFound: no such agent (or another tenant's).
            InvalidInput: empty input.
            InvalidInput: input blank or over `kernel.max_input_chars` (as a turn's); a
                `max_cost` over the agent's.
        """
        if not self.accepting:
            raise ShuttingDown("the server is shutting down")
        await self._agents.sees(tenant_id, agent)  # read only after a change heard of, or on a miss
        spec = run_spec(self._agents.get(tenant_id, agent), max_cost)
        check_input(text, self._settings.kernel.max_input_chars)
        if run_id is None:
            run_id = new_run_id()
        elif run_id in self._runs.handles or await self.store.load_run(tenant_id, run_id) is not None:
            return run_id
        handle = await self._runs.submit(tenant_id, spec, text, session_id, run_id, context=context, owner=owner)
        return handle.run_id

    async def fork_run(
        self, tenant_id: str, run_id: str, at_seq: int, edit: ForkEdit | None = None, *, fork_id: str | None = None
    ) -> str:
        """Fork the tenant's run at step `at_seq` (optionally with that step's result edited) into
        a new run, started in the background; returns its id (`fork_id` when given). The new run
        replays the copied steps without a model or tool call and continues live; the original is
        not touched (`agentos.agents.forks`).

        Raises:
            ShuttingDown: the server is draining.
            NotFound: no such run (or another tenant's).
            InvalidInput: `at_seq` not a finished step of the run, or an edit that does not fit
                it (codes: `agentos.agents.forks.fork_steps`).
            AdmissionRejected: as `start_run`.
        """
        if not self.accepting:
            raise ShuttingDown("the server is shutting down")
        handle = await self._runs.fork(tenant_id, run_id, at_seq, edit, fork_id or new_run_id())
        return handle.run_id

    async def run_owner(self, tenant_id: str, run_id: str) -> str | None:
        """The end user the tenant's run is for (None: a tenant key's). Raises: NotFound (also
        for another tenant's run)."""
        handle = self._runs.handles.get(run_id)
        row = handle.row if handle is not None else await self.store.load_run(tenant_id, run_id)
        if row is None or row.tenant_id != tenant_id:
            raise run_not_found(run_id)
        return row.owner

    async def get_run(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        """The tenant's run's row, plus its pending human request if any. Raises: NotFound (also
        for another tenant's run)."""
        return await self._runs.run_view(tenant_id, run_id)

    async def list_runs(self, tenant_id: str, query: RunQuery) -> dict[str, Any]:
        """A page of the tenant's runs, newest first, as journaled (a run's status here can trail
        `get_run`'s, which this node's live handle answers, by the write in flight)."""
        page = await self.store.list_runs(tenant_id, query)
        return {"data": [run.to_dict() for run in page], "next_cursor": next_cursor(page, query.limit)}

    async def events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> AsyncGenerator[RunEvent, None]:
        """Every event of the run after `after_seq`, stored then live, until the terminal one (tokens:
        live only). Raises: NotFound (before the first event; also for another tenant's run)."""
        if self._cluster is not None and await self._cluster.remote_row(tenant_id, run_id) is not None:
            events = self._cluster.follow(tenant_id, run_id, after_seq)
        else:
            events = self._runs.events(tenant_id, run_id, await self._runs.handle(tenant_id, run_id), after_seq)
        async for event in events:
            yield event

    async def cancel(self, tenant_id: str, run_id: str, *, forward: bool = True) -> dict[str, Any]:
        """Soft cancel: a working run stops before its next step; a waiting one at once. Raises:
        NotFound (also for another tenant's run). `forward=False`: here only (a request another
        node sent, `agentos.agents.cluster`), also for the answers and terminates."""
        forwarded = forward and await self._forwarded(tenant_id, run_id, {"kind": "cancel"})
        if not forwarded and await self._runs.handle(tenant_id, run_id) is not None:
            self._driver.handle(RunCancelRequested(run_id, hard=False))
        return await self.get_run(tenant_id, run_id)

    def steer(
        self, tenant_id: str, run_id: str, text: str, claim: Callable[[], bool] = lambda: True, key: str = ""
    ) -> asyncio.Future[int | None] | None:
        """Offer `text` to a run this node holds (working, or waiting for a human): it is taken in
        at the run's next step, before its next model call, as a user message journaled there
        (`Runner._take_steers`). The future resolves with that journal step, or None when it
        was not delivered (`claim()` said no, or the run ended first). None: the run is not
        held here (finished, or on another node).

        Raises: NotFound (another tenant's run)."""
        handle = self._runs.handles.get(run_id)
        if handle is None:
            return None
        if handle.row.tenant_id != tenant_id:
            raise run_not_found(run_id)
        delivered: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        handle.steers.append(Steer(text, claim, delivered, key))
        return delivered

    async def steer_run(self, tenant_id: str, run_id: str, text: str) -> dict[str, Any]:
        """`POST /v1/runs/{run_id}/steer`: deliver `text` to a working run at its next step,
        before its next model call; returns once it is journaled there (`seq`), so a replay
        after a crash has it exactly once. A run another node works (PostgreSQL) gets it through
        that node (`RunCluster.steer`); `seq` is None when that node did not take it in within
        `STEER_WAIT_S` (it stays queued for the run). A client that leaves before the answer
        leaves the message on its way all the same.

        Raises: NotFound (also another tenant's run); Conflict `run_not_working` (finished,
        waiting for a human, or it ended before its next step)."""
        check_input(text, self._settings.kernel.max_input_chars)
        row = None if self._cluster is None else await self._cluster.remote_row(tenant_id, run_id)
        if row is not None and self._cluster is not None:
            return {"run_id": run_id, "seq": await self._cluster.steer(row, text)}
        await self._runs.handle(tenant_id, run_id)  # NotFound for another tenant's run
        seq = await self.offer_steer(tenant_id, run_id, text)
        if seq is None:
            raise Conflict(f"run {run_id!r} stopped before its next step", code="run_not_working")
        return {"run_id": run_id, "seq": seq}

    def offer_steer(self, tenant_id: str, run_id: str, text: str, key: str = "") -> asyncio.Future[int | None]:
        """Offer `text` to a run working on this node (`steer`, `key` journaled with it); its
        future resolves with the journal step, or None if the run ended before its next step.

        Raises: NotFound (another tenant's run); Conflict `run_not_working` (not working here)."""
        handle = self._runs.handles.get(run_id)
        if handle is None or handle.task is None or handle.status != "running":
            status = "finished" if handle is None else handle.status
            raise Conflict(f"run {run_id!r} is not working on this node ({status})", code="run_not_working")
        delivered = self.steer(tenant_id, run_id, text, key=key)
        assert delivered is not None  # its handle is here
        return delivered

    async def terminate(self, tenant_id: str, run_id: str, *, forward: bool = True) -> dict[str, Any]:
        """Hard stop in any state: the task is cancelled and `run.cancelled` recorded; returns
        once the run has ended. Raises: NotFound (also for another tenant's run)."""
        forwarded = forward and await self._forwarded(tenant_id, run_id, {"kind": "terminate"})
        handle = None if forwarded else await self._runs.handle(tenant_id, run_id)
        if handle is not None:
            await terminate_here(self._runs, handle)
        return await self.get_run(tenant_id, run_id)

    async def answer(
        self,
        tenant_id: str,
        run_id: str,
        operation_id: str,
        answer: str = "",
        *,
        approve: bool | None = None,
        args_hash: str | None = None,
        forward: bool = True,
    ) -> dict[str, Any]:
        """Answer the human request `operation_id` and resume the run (`agentos.agents.interventions`).

        Raises:
            ShuttingDown: the server is draining.
            NotFound: no such run (or another tenant's).
            Conflict: the run does not wait for that operation, or `args_hash` is not the hash of
                the arguments awaiting approval.
            InvalidInput: an approval without `approve` or `args_hash`; an uncertain step answered
                with something else than "retry" or "skip".
        """
        if not self.accepting:  # an answer would start the run's task again
            raise ShuttingDown("the server is shutting down")
        request = dict(kind="answer", operation_id=operation_id, answer=answer, approve=approve, args_hash=args_hash)
        if not (forward and await self._forwarded(tenant_id, run_id, request)):
            await apply_answer(self._runs, tenant_id, run_id, operation_id, answer, approve, args_hash)
        return await self.get_run(tenant_id, run_id)

    async def _forwarded(self, tenant_id: str, run_id: str, request: dict[str, Any]) -> bool:
        """True when another node drives the run: the request was checked and sent to it."""
        return self._cluster is not None and await self._cluster.forward(tenant_id, run_id, request)

    async def delete_session_runs(self, tenant_id: str, session_id: str) -> None:
        """Terminate the tenant's session's runs and delete them: journal rows, payloads, workspaces."""
        handles = self._runs.handles.values()
        ours = [h for h in handles if h.row.session_id == session_id and h.row.tenant_id == tenant_id]
        for handle in ours:
            await self.terminate(tenant_id, handle.run_id)
        deleted = await self.store.delete_session_runs(tenant_id, session_id)
        if self._workspaces is not None:
            workspaces = self._workspaces
            await asyncio.to_thread(remove_dirs, [workspaces / run_id for run_id in deleted])

    async def session_has_open_runs(self, tenant_id: str, session_id: str) -> bool:
        """Retention: whether a run of the session is unfinished (on any node: from the journal)."""
        return await self.store.session_has_open_runs(tenant_id, session_id)

    async def delete_idle_runs(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        """Retention (`agentos.runtime.retention.ExpiringRuns`): delete up to `limit` finished
        runs of the tenant outside any session, last updated before `before_ms`, with their
        children and workspaces; how many runs went (children included). A finished run has
        no handle working on it: nothing in memory to stop."""
        deleted = await self.store.delete_idle_runs(tenant_id, before_ms, limit)
        if deleted and self._workspaces is not None:
            workspaces = self._workspaces
            await asyncio.to_thread(remove_dirs, [workspaces / run_id for run_id in deleted])
        return len(deleted)


def run_spec(spec: AgentSpec, max_cost: float | None) -> AgentSpec:
    """The spec a run keeps: the agent's, with the run's own `max_cost` where one is asked.

    Raises: InvalidInput: past the agent's own `max_cost`."""
    if max_cost is None:
        return spec
    if spec.max_cost and max_cost > spec.max_cost:
        raise InvalidInput(f"max_cost: at most the agent's max_cost ({spec.max_cost:g}), got {max_cost:g}")
    return msgspec.structs.replace(spec, max_cost=max_cost)
