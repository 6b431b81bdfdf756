"""What the agent loop (`Runner`) needs from the engine that owns it, as protocols."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentos.agents.handle import RunHandle
from agentos.agents.traces import RunTraces
from agentos.config.agents import AgentSpec
from agentos.journal.journal import Journal, RunRow
from agentos.journal.store import JournalStore
from agentos.providers.base import Provider
from agentos.sandbox.sandbox import Sandbox

if TYPE_CHECKING:
    from agentos.knowledge.service import KnowledgeService


class ToolHub(Protocol):
    """MCP tools (see `agentos.mcp.tools`)."""

    async def schemas(self, spec: AgentSpec) -> list[dict[str, Any]]:
        """Raises: McpUnavailable (`agentos.mcp.checks`): a server cannot start; the run fails."""
        ...

    async def call(self, spec: AgentSpec, tool_name: str, arguments: dict[str, Any]) -> str: ...


class RunHost(Protocol):
    """What the loop needs from the service that owns it."""

    store: JournalStore
    journal: Journal
    provider: Provider
    traces: RunTraces
    sandbox: Sandbox
    mcp: ToolHub
    knowledge: KnowledgeService | None  # what `search_knowledge` searches; None: not on this server

    @property
    def suspending(self) -> bool: ...

    def now_ms(self) -> int: ...

    def emit(
        self,
        handle: RunHandle,
        event_type: str,
        data: dict[str, Any],
        *,
        into: list[Any] | None = ...,
        held: list[Callable[[], None]] | None = ...,
    ) -> None:
        """Journal and publish a run event; `into`: add its write to the step's writes instead;
        `held`: publish it only when the caller runs what was added there (after its commit)."""
        ...

    def spent(self, handle: RunHandle, usage: dict[str, int]) -> None:
        """A model call of the run finished with this usage (the tenant's tokens per day)."""
        ...

    def workdir(self, run_id: str) -> Path: ...

    def permit(self, run_id: str) -> AbstractAsyncContextManager[None]:
        """Hold a provider permit of the kernel for one model call of the run."""
        ...

    async def finish(self, handle: RunHandle, status: str, *, result: str | None = None, reason: str) -> None: ...

    async def park(self, handle: RunHandle, request: dict[str, Any]) -> None: ...

    async def run_child(self, parent: RunHandle, seq: int, agent: str, text: str) -> RunRow: ...

    async def child_exists(self, parent: RunHandle, child_run_id: str) -> bool: ...

    async def count_children(self, run_id: str) -> int: ...
