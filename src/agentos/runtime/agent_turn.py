"""A turn in a session with an agent: a run of that agent, its events streamed as the turn's.

The run is the same durable tool loop as `POST /v1/agents/{name}/runs`. The turn itself holds
no provider permit (it was submitted with `wants_permit=False`): each of its run's model calls
takes one, so a run waiting for a human holds none.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from agentos.kernel import RUN_TERMINAL_EVENTS, OnBusy
from agentos.providers.base import Message
from agentos.runtime.transcript import begin, message, record_event
from agentos.runtime.turn import Outcome, Turn, TurnSink
from agentos.store.base import Store

# First-party cancels that stop the run behind the turn. Not a shutdown, and not a client
# that went away: the run is durable, resumes after a restart, and stays reachable at
# /v1/runs/{run_id}.
_STOPS_RUN = frozenset({"superseded", "cancelled", "session_deleted"})
# The run's own timeline, not the turn's: the client answers humans at /v1/runs/{run_id}, and
# a model call's events (two per call, on GET /v1/runs/{run_id}/events) would cost the session
# store two more rows per model call for what the turn's tokens already show.
_RUN_ONLY = frozenset({"run.started", "model.started", "model.completed"})


class RunEventView(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def data(self) -> Mapping[str, Any]: ...


class AgentRuns(Protocol):
    """What the runtime needs of the agent runs (`agentos.agents.RunService` implements it): the
    runtime sits below the agents, which start their runs on it, so it names them by this
    protocol and `open_services` hands the service in."""

    accepting: bool

    async def start_run(
        self,
        tenant_id: str,
        agent: str,
        text: str,
        session_id: str,
        *,
        context: list[Message] | None,
        owner: str | None = None,
    ) -> str: ...

    def events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> AsyncIterator[RunEventView]: ...

    async def terminate(self, tenant_id: str, run_id: str, *, forward: bool = True) -> dict[str, Any]: ...

    def steer(
        self, tenant_id: str, run_id: str, text: str, claim: Callable[[], bool]
    ) -> asyncio.Future[int | None] | None: ...

    async def sees_agent(self, tenant_id: str, name: str) -> bool: ...

    def has_agent(self, tenant_id: str, name: str) -> bool: ...

    def agent_on_busy(self, tenant_id: str, name: str) -> OnBusy | None:
        """The `on_busy` its spec sets for its sessions' turns; None: none (or no such agent)."""
        ...

    async def delete_session_runs(self, tenant_id: str, session_id: str) -> None: ...


class AgentTurns:
    def __init__(self, runs: AgentRuns, store: Store, history_max: int) -> None:
        self._runs = runs
        self._store = store
        self._history_max = history_max

    async def run(self, turn: Turn, sink: TurnSink, partial: list[str]) -> Outcome:
        assert turn.agent is not None
        context = await begin(self._store, turn, sink, self._history_max)  # the run continues the session
        if turn.prompt is not None:  # a client's conversation, ending with the turn's input
            context = turn.prompt[:-1]
        turn.run_id = await self._runs.start_run(
            turn.tenant_id, turn.agent, turn.input, turn.session_id, context=context, owner=turn.owner
        )
        for text, claim in turn.steers:  # sent while the run was being started
            self._runs.steer(turn.tenant_id, turn.run_id, text, claim)
        turn.steers.clear()
        async for event in self._runs.events(turn.tenant_id, turn.run_id):
            if event.type == "token":
                partial.append(event.data.get("delta", ""))
            elif event.type in RUN_TERMINAL_EVENTS:
                return await self._end(turn, event.type, event.data)
            if event.type not in _RUN_ONLY:
                name = "turn.steered" if event.type == "run.steered" else event.type  # the turn's own word
                data = {**event.data, "run_id": turn.run_id}
                await sink.send(turn.next_event_id(), name, data)
                if name != "token":  # stored, so a resumed turn stream replays it
                    record_event(self._store, turn, name, data)
        raise AssertionError("a run's event stream ends with its terminal event")  # pragma: no cover

    def steer(self, into: Turn, text: str, claim: Callable[[], bool]) -> None:
        """Offer `text` to the run behind the agent turn `into` (kept on the turn until its run
        exists). Not taken (the run ended first), the message waits its turn in the queue."""
        if into.run_id is None:
            into.steers.append((text, claim))
        else:
            self._runs.steer(into.tenant_id, into.run_id, text, claim)

    async def stop(self, turn: Turn, reason: str) -> None:
        if turn.run_id is not None and reason in _STOPS_RUN:
            await asyncio.shield(self._runs.terminate(turn.tenant_id, turn.run_id))

    async def _end(self, turn: Turn, kind: str, data: Mapping[str, Any]) -> Outcome:
        turn.finishing = True
        run = {"turn_id": turn.turn_id, "run_id": turn.run_id}
        if kind == "run.completed":
            result = str(data.get("result") or "")
            answer = message(turn, "assistant", result, "completed")
            return Outcome("turn.completed", {**run, "result": result}, answer)  # stored with its event
        name = "turn.failed" if kind == "run.failed" else "turn.cancelled"
        self._store.add_message(message(turn, "assistant", str(data.get("result") or ""), name[5:]))
        return Outcome(name, {**run, "reason": str(data.get("reason", "run_failed"))})
