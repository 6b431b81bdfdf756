"""Sessions in memory: which are loaded, and which agent runs each one's turns.

The store holds every session; the kernel holds the ones in memory and evicts the idle ones
(`EvictSession`). A turn for an evicted session loads it back first (`ensure_loaded`).

Every call names the caller's tenant; a session of another tenant answers `SessionNotFound`,
exactly like one that does not exist. The tenant of each in-memory session is kept here, so
a turn for a loaded session checks it without a store read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentos.clock import wall_ms
from agentos.errors import NotFound, SessionNotFound
from agentos.ids import new_id
from agentos.kernel import DEFAULT_ON_BUSY, EvictSession, OnBusy, SessionClosed, SessionOpened
from agentos.runtime.driver import Driver
from agentos.store.base import Store
from agentos.store.records import SessionRecord

if TYPE_CHECKING:
    from agentos.runtime.agent_turn import AgentRuns

# A session opened without an agent is stored with this name: it runs the agent so named if
# one is defined, else plain chat turns (one model call, no tools). The API reports what runs
# the turns (`reported_agent`): "default" for the agent, None for plain chat.
DEFAULT_AGENT = "default"


class Sessions:
    def __init__(
        self,
        driver: Driver,
        store: Store,
        runs: AgentRuns | None,
        on_evicted: Callable[[], None] | None = None,  # after each eviction (`runtime.reclaim`)
    ) -> None:
        self._driver = driver
        self._on_evicted = on_evicted
        self._store = store
        self._runs = runs
        # The agent of each in-memory session whose turns an agent runs; kept here so that a
        # turn does not read the store to learn how to run.
        self._agents: dict[str, str] = {}
        self._tenants: dict[str, str] = {}  # session id -> tenant, for the sessions in memory
        self._on_busy: dict[str, OnBusy] = {}  # a default other than "replace", for the sessions in memory
        self._owners: dict[str, str] = {}  # the end user of each in-memory session a user opened
        driver.on(EvictSession, self._evict)

    def agent_of(self, session_id: str) -> str | None:
        """The agent that runs the session's turns, or None for plain chat turns."""
        return self._agents.get(session_id)

    async def agent_running(self, tenant_id: str, session_id: str) -> str | None:
        """What `reported_agent` says of the tenant's session: from memory for a session in
        memory (a session's agent never changes), else from its stored record.

        Raises: SessionNotFound (also for another tenant's session).
        """
        if self._tenants.get(session_id) == tenant_id and self._driver.kernel.has_session(session_id):
            return self._agents.get(session_id)
        return self.reported_agent(await self.get(tenant_id, session_id))

    def reported_agent(self, record: SessionRecord) -> str | None:
        """The agent that runs (or, once loaded, will run) the session's turns; None for plain chat.

        A session in memory answers with what its turns run now, so the two never disagree.
        """
        if record.agent != DEFAULT_AGENT:
            return record.agent
        if self._driver.kernel.has_session(record.session_id):
            return self._agents.get(record.session_id)
        return DEFAULT_AGENT if self._has_default_agent(record.tenant_id) else None

    def owner_of(self, session_id: str) -> str | None:
        """The end user who opened the in-memory session (None: a tenant key)."""
        return self._owners.get(session_id)

    def on_busy_of(self, session_id: str) -> OnBusy:
        """The default `on_busy` of the in-memory session's turns: its own (set when it was
        opened), else its agent's, else "replace"."""
        return self._on_busy.get(session_id, DEFAULT_ON_BUSY)

    async def create(
        self,
        tenant_id: str,
        agent: str | None,
        metadata: dict[str, Any],
        *,
        on_busy: OnBusy | None = None,
        owner: str | None = None,
    ) -> SessionRecord:
        """Open a session of `tenant_id` run by `agent` (None: the default, see `DEFAULT_AGENT`);
        the agent must be one the tenant sees (a config agent or one of its own). `owner`: the
        end user who opens it (None: a tenant key).

        Raises: NotFound `agent_not_found` (404, as for a run or a trigger of an unknown agent).
        """
        agent = DEFAULT_AGENT if agent is None else agent
        if agent != DEFAULT_AGENT and (self._runs is None or not await self._runs.sees_agent(tenant_id, agent)):
            raise NotFound(
                f"unknown agent {agent!r}; define it in the config or with POST /v1/agents", code="agent_not_found"
            )
        record = SessionRecord(
            session_id=new_id("ses"),
            tenant_id=tenant_id,
            agent=agent,
            metadata=metadata,
            created_at_ms=wall_ms(),
            on_busy=on_busy,
            owner=owner,
        )
        await self._store.create_session(record)
        self._open(record)
        return record

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        """Raises: SessionNotFound (also for another tenant's session)."""
        record = await self._store.get_session(tenant_id, session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    def check_loaded(self, tenant_id: str, session_id: str) -> None:
        """For a session in memory: it is the tenant's.

        Raises: SessionNotFound (not in memory, or another tenant's).
        """
        if self._tenants.get(session_id) != tenant_id:
            raise SessionNotFound(session_id)

    async def ensure_loaded(self, tenant_id: str, session_id: str) -> None:
        """Bring an evicted session of the tenant back into memory.

        Raises: SessionNotFound (also for another tenant's session).
        """
        if self._driver.kernel.has_session(session_id) and session_id in self._tenants:
            self.check_loaded(tenant_id, session_id)
            return
        record = await self.get(tenant_id, session_id)
        if not self._driver.kernel.has_session(session_id):
            self._open(record)
        else:  # loaded meanwhile by another request
            self._tenants[session_id] = record.tenant_id

    async def delete(self, tenant_id: str, session_id: str) -> None:
        """Delete the tenant's session with everything it left: transcript, events, its runs.

        Raises: SessionNotFound (also for another tenant's session).
        """
        if not await self._store.delete_session(tenant_id, session_id):
            raise SessionNotFound(session_id)
        self._driver.handle(SessionClosed(session_id))  # cancels its running turn
        self._agents.pop(session_id, None)
        self._on_busy.pop(session_id, None)
        self._owners.pop(session_id, None)
        self._tenants.pop(session_id, None)
        if self._runs is not None:
            await self._runs.delete_session_runs(tenant_id, session_id)

    def _open(self, record: SessionRecord) -> None:
        # "default" is the plain chat turn unless an agent of that name is defined: then every
        # session without an agent of its own runs it.
        if record.agent != DEFAULT_AGENT or self._has_default_agent(record.tenant_id):
            self._agents[record.session_id] = record.agent
        on_busy = record.on_busy
        if on_busy is None and record.session_id in self._agents and self._runs is not None:
            on_busy = self._runs.agent_on_busy(record.tenant_id, record.agent)
        if on_busy is not None and on_busy != DEFAULT_ON_BUSY:
            self._on_busy[record.session_id] = on_busy
        if record.owner is not None:
            self._owners[record.session_id] = record.owner
        self._tenants[record.session_id] = record.tenant_id
        self._driver.handle(SessionOpened(record.session_id))

    def _has_default_agent(self, tenant_id: str) -> bool:
        return self._runs is not None and self._runs.has_agent(tenant_id, DEFAULT_AGENT)

    def _evict(self, command: EvictSession) -> None:
        self._store.forget_session(command.session_id)
        self._agents.pop(command.session_id, None)
        self._on_busy.pop(command.session_id, None)
        self._owners.pop(command.session_id, None)
        self._tenants.pop(command.session_id, None)
        if self._on_evicted is not None:
            self._on_evicted()
