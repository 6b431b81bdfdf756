"""The runtime: the async driver around the kernel.

It is the only caller of `Kernel.handle` (synchronous, so atomic on the event loop: no lock),
carries out the commands it returns, and runs one task per turn. It keeps one timer, set to the
kernel's next deadline, and feeds `Tick` when it fires.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing, suppress
from typing import TYPE_CHECKING, Any

from agentos.clock import Clock, MonotonicClock, wall_ms
from agentos.config import Settings
from agentos.errors import (
    AdmissionRejected,
    InvalidInput,
    ProviderError,
    ProviderLimitTimeout,
    ProviderProtocolError,
    SessionNotFound,
)
from agentos.kernel import (
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    Command,
    Event,
    EvictSession,
    FailTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    ProviderReleased,
    RejectTurn,
    SessionClosed,
    SessionOpened,
    StreamRequested,
    Tick,
    TurnEnded,
    TurnSubmitted,
)
from agentos.metrics import Metrics
from agentos.providers.base import ChatRequest, Completion, Message, Provider, StreamItem
from agentos.runtime.turn import Turn, TurnSink
from agentos.store.base import Store
from agentos.store.records import EventRecord, MessageRecord, SessionRecord

if TYPE_CHECKING:
    from agentos.agents import RunService

log = logging.getLogger("agentos.turns")


_ID_PREFIX = uuid.uuid4().hex[:16]  # random per process: ids stay unique across restarts
_id_counter = itertools.count(1)


DEFAULT_AGENT = "default"  # a plain chat turn: one model call, no tools
_STOPS_RUN = frozenset({"superseded", "cancelled", "session_deleted"})
_RUN_TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})


def new_id(prefix: str) -> str:
    """Unique ids without a syscall per id (uuid4 reads the kernel's random pool each time)."""
    return f"{prefix}_{_ID_PREFIX}{next(_id_counter):08x}"


class Runtime:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        provider: Provider,
        metrics: Metrics,
        *,
        clock: Clock | None = None,
        runs: RunService | None = None,
    ) -> None:
        k = settings.kernel
        self.kernel = Kernel(
            KernelLimits(
                max_in_flight_turns=k.max_in_flight_turns,
                concurrency_limit=k.concurrency_limit,
                session_ttl_s=k.session_ttl_secs,
                permit_wait_timeout_s=k.permit_wait_timeout_s,
                retry_after_s=k.retry_after_s,
            )
        )
        self.settings = settings
        self.store = store
        self.provider = provider
        self.metrics = metrics
        self.clock = clock or MonotonicClock()
        self._turns: dict[str, Turn] = {}
        self._stream_permits: dict[str, asyncio.Future[None]] = {}  # run model calls waiting
        self.runs = runs
        # The agent of each in-memory session whose agent is not the plain chat default; kept
        # here so that a turn does not read the store to learn how to run.
        self._session_agents: dict[str, str] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._lag_timer: asyncio.TimerHandle | None = None
        self._history_limit = k.history_max_messages
        self.accepting = True
        self._idle = asyncio.Event()  # set while no turn is live
        self._idle.set()
        metrics.bind(self.kernel.statistics, store.statistics, lambda: len(self._turns))

    # -- driving the kernel ------------------------------------------------------------------

    def _handle(self, event: Event) -> list[Command]:
        commands = self.kernel.handle(event, self.clock.now())
        for command in commands:
            self._execute(command)
        self._arm_timer()
        return commands

    def _execute(self, command: Command) -> None:
        match command:
            case GrantPermit(turn_id):
                permit = self._waiting_permit(turn_id)
                if permit is not None:
                    permit.set_result(None)
            case CancelTurn(turn_id, reason):
                self._cancel_task(turn_id, reason)
            case FailTurn(turn_id, reason):
                permit = self._waiting_permit(turn_id)
                if permit is not None:
                    permit.set_exception(ProviderLimitTimeout("no provider permit in time"))
            case EvictSession(session_id):
                self.store.forget_session(session_id)
                self._session_agents.pop(session_id, None)
            case AcceptTurn() | RejectTurn():
                pass  # answered by the caller of _handle

    def _waiting_permit(self, turn_id: str) -> asyncio.Future[None] | None:
        """The future a turn or a run's stream waits on for its permit, if it still waits."""
        turn = self._turns.get(turn_id)
        permit = turn.permit if turn is not None else self._stream_permits.get(turn_id)
        return permit if permit is not None and not permit.done() else None

    def _cancel_task(self, turn_id: str, reason: str) -> None:
        turn = self._turns.get(turn_id)
        if turn is None or turn.finishing:
            return
        turn.cancel_reason = reason
        if turn.task is not None:
            turn.task.cancel()

    def _arm_timer(self) -> None:
        deadline = self.kernel.next_deadline()
        if deadline is None or deadline >= self._timer_at:
            return  # a timer that fires early only costs one empty Tick
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, deadline - self.clock.now())
        self._timer_at = deadline
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self.tick()

    def start_lag_probe(self, interval_s: float = 0.1) -> None:
        """Measure how late the loop runs a timer: the queueing delay every request sees."""
        loop = asyncio.get_running_loop()

        def probe(expected: float) -> None:
            now = loop.time()
            self.metrics.loop_lag_ms.observe(max(0.0, now - expected) * 1000)
            if self.accepting:
                self._lag_timer = loop.call_at(now + interval_s, probe, now + interval_s)

        self._lag_timer = loop.call_at(loop.time() + interval_s, probe, loop.time() + interval_s)

    def tick(self) -> None:
        """Fire the kernel's due deadlines (the timer calls this; tests with a FakeClock too)."""
        self._handle(Tick())

    # -- sessions -------------------------------------------------------------------------------

    async def create_session(self, agent: str, metadata: dict[str, Any]) -> SessionRecord:
        if agent != DEFAULT_AGENT and (self.runs is None or not self.runs.has_agent(agent)):
            raise InvalidInput(f"unknown agent {agent!r}; define it in the config or with POST /v1/agents")
        record = SessionRecord(session_id=new_id("ses"), agent=agent, metadata=metadata, created_at_ms=wall_ms())
        await self.store.create_session(record)
        self._open(record)
        return record

    def _open(self, record: SessionRecord) -> None:
        # "default" is the plain chat turn unless an agent of that name is defined: then every
        # session without an agent of its own runs it.
        if record.agent != DEFAULT_AGENT or (self.runs is not None and self.runs.has_agent(DEFAULT_AGENT)):
            self._session_agents[record.session_id] = record.agent
        self._handle(SessionOpened(record.session_id))

    async def get_session(self, session_id: str) -> SessionRecord:
        record = await self.store.get_session(session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def ensure_loaded(self, session_id: str) -> None:
        """Bring an evicted session back into memory; 404 if the store does not know it."""
        if self.kernel.has_session(session_id):
            return
        record = await self.get_session(session_id)
        if not self.kernel.has_session(session_id):
            self._open(record)

    async def delete_session(self, session_id: str) -> None:
        if not await self.store.delete_session(session_id):
            raise SessionNotFound(session_id)
        self._handle(SessionClosed(session_id))
        self._session_agents.pop(session_id, None)

    # -- turns ----------------------------------------------------------------------------------

    async def start_turn(self, session_id: str, text: str) -> Turn:
        """Admit a turn (or raise AdmissionRejected / SessionNotFound); `run_turn` runs it."""
        await self.ensure_loaded(session_id)
        turn = Turn(new_id("turn"), session_id, text, self.clock.now())
        self._turns[turn.turn_id] = turn
        self._idle.clear()
        commands = self._handle(TurnSubmitted(session_id, turn.turn_id))
        if isinstance(commands[0], RejectTurn):
            self._forget(turn)
            raise AdmissionRejected(commands[0].retry_after_s)
        if GrantPermit(turn.turn_id) not in commands:
            turn.permit = asyncio.get_running_loop().create_future()
        return turn

    def cancel_turn(self, session_id: str, reason: str = "cancelled") -> str | None:
        """Cancel the session's running turn; returns its id, or None if none was running."""
        turn_id = self.kernel.active_turn(session_id)
        self._handle(CancelRequested(session_id, reason))
        return turn_id

    async def acquire_stream(self, stream_id: str) -> None:
        """Take a provider permit for a stream outside any turn (an agent run's model call):
        runs and turns share `kernel.concurrency_limit`. Raises ProviderLimitTimeout."""
        commands = self._handle(StreamRequested(stream_id))
        if GrantPermit(stream_id) in commands:
            return
        permit = self._stream_permits[stream_id] = asyncio.get_running_loop().create_future()
        try:
            await permit
        except BaseException:
            self.release_stream(stream_id)
            raise
        finally:
            self._stream_permits.pop(stream_id, None)

    def release_stream(self, stream_id: str) -> None:
        self._handle(TurnEnded(stream_id))

    def permitted(self, provider: Provider) -> Provider:
        """`provider`, each of whose streams holds one of this runtime's permits."""
        return _PermittedProvider(self, provider)

    @property
    def live_turns(self) -> Iterable[Turn]:
        return self._turns.values()

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        """Run an admitted turn in the calling task, sending its events to `sink`.

        First-party cancels (last-wins, DELETE, shutdown) end it with `turn.cancelled`; an
        outside cancel of the calling task (its client went away) is recorded, then re-raised.
        """
        turn.task = asyncio.current_task()
        partial: list[str] = []
        try:
            if turn.cancel_reason is not None:  # cancelled before it started running
                raise asyncio.CancelledError
            agent = self._session_agents.get(turn.session_id)
            if agent is not None and self.runs is not None:
                await self._run_agent(turn, agent, self.runs, sink, partial)
            else:
                await self._run_steps(turn, sink, partial)
        except asyncio.CancelledError:
            if turn.cancel_reason is None:
                await self._finish(turn, sink, "turn.cancelled", {"reason": "client_disconnected"}, partial)
                raise
            if turn.task is not None:
                turn.task.uncancel()
            await self._stop_run(turn, turn.cancel_reason)
            await self._finish(turn, sink, "turn.cancelled", {"reason": turn.cancel_reason}, partial)
        except ConnectionError:
            await self._finish(turn, sink, "turn.cancelled", {"reason": "client_disconnected"}, partial)
        except ProviderError as exc:
            await self._finish(turn, sink, "turn.failed", {"reason": exc.code, "message": str(exc)}, partial)
        except Exception as exc:
            log.exception("turn %s failed", turn.turn_id)
            data = {"reason": "internal_error", "message": str(exc)}
            await self._finish(turn, sink, "turn.failed", data, partial)
        finally:
            self._forget(turn)
            self._handle(TurnEnded(turn.turn_id))

    def _forget(self, turn: Turn) -> None:
        self._turns.pop(turn.turn_id, None)
        if not self._turns:
            self._idle.set()

    async def _begin(self, turn: Turn, sink: TurnSink) -> list[Message]:
        """Announce the turn, store its input; return the session's earlier messages
        (`history_max_messages` in all with this turn's input)."""
        await sink.send(turn.next_event_id(), "turn.started", {"turn_id": turn.turn_id, "session_id": turn.session_id})
        self._record_event(turn, "turn.started", {})
        await self.store.wait_space()
        earlier = self._history_limit - 1
        history = await self.store.history(turn.session_id, limit=earlier) if earlier else []
        self.store.add_message(self._message(turn, "user", turn.input, "completed"))
        return self._messages(history)

    async def _run_steps(self, turn: Turn, sink: TurnSink, partial: list[str]) -> None:
        messages = [*await self._begin(turn, sink), {"role": "user", "content": turn.input}]
        if turn.permit is not None:
            await turn.permit
        try:
            completion = await self._stream(turn, sink, messages, partial)
        finally:
            self._handle(ProviderReleased(turn.turn_id))
        turn.finishing = True
        usage = {
            "prompt_tokens": completion.usage.prompt_tokens,
            "completion_tokens": completion.usage.completion_tokens,
        }
        message = self._message(turn, "assistant", completion.text, "completed", usage)
        await self.store.commit_message(message)  # durable before the client sees turn.completed
        self.metrics.tokens_prompt.inc(completion.usage.prompt_tokens)
        self.metrics.tokens_completion.inc(completion.usage.completion_tokens)
        data = {"turn_id": turn.turn_id, "usage": usage, "finish_reason": completion.finish_reason}
        await self._finish(turn, sink, "turn.completed", data, None)

    async def _run_agent(self, turn: Turn, agent: str, runs: RunService, sink: TurnSink, partial: list[str]) -> None:
        """A turn in a session with an agent is a run of that agent: the same durable tool
        loop as `POST /v1/agents/{name}/runs`, its events streamed as the turn's."""
        context = await self._begin(turn, sink)  # the session so far: the run continues it
        # The run's model calls take permits of their own (Runtime.permitted).
        self._handle(ProviderReleased(turn.turn_id))
        turn.run_id = await runs.start_run(agent, turn.input, turn.session_id, context=context)
        async for event in runs.events(turn.run_id):
            if event.type == "token":
                partial.append(event.data.get("delta", ""))
            elif event.type in _RUN_TERMINAL:
                await self._end_run_turn(turn, sink, event.type, event.data)
                return
            if event.type != "run.started":  # the client answers humans at /v1/runs/{run_id}
                await sink.send(turn.next_event_id(), event.type, {**event.data, "run_id": turn.run_id})

    async def _stop_run(self, turn: Turn, reason: str) -> None:
        """A first-party cancel reaches the run behind the turn. Not a shutdown, and not a
        client that went away: the run is durable, resumes after a restart, and stays
        reachable at /v1/runs/{run_id}."""
        if turn.run_id is not None and self.runs is not None and reason in _STOPS_RUN:
            await asyncio.shield(self.runs.terminate(turn.run_id))

    async def _end_run_turn(self, turn: Turn, sink: TurnSink, kind: str, data: dict[str, Any]) -> None:
        turn.finishing = True
        run = {"run_id": turn.run_id}
        if kind == "run.completed":
            result = str(data.get("result") or "")
            await self.store.commit_message(self._message(turn, "assistant", result, "completed"))
            await self._finish(turn, sink, "turn.completed", {"turn_id": turn.turn_id, **run, "result": result}, None)
        else:
            name = "turn.failed" if kind == "run.failed" else "turn.cancelled"
            reason = {"reason": str(data.get("reason", "run_failed")), **run}
            self.store.add_message(self._message(turn, "assistant", str(data.get("result") or ""), name[5:]))
            await self._finish(turn, sink, name, {"turn_id": turn.turn_id, **reason}, None)

    async def _stream(self, turn: Turn, sink: TurnSink, messages: list[Message], partial: list[str]) -> Completion:
        first = True
        # aclosing: an error in this loop's body (the client went away) must abort the
        # upstream now, not whenever the generator is collected.
        async with aclosing(self.provider.stream(ChatRequest(messages))) as stream:
            async for item in stream:
                if isinstance(item, Completion):
                    return item
                if first:
                    first = False
                    self.metrics.ttft_ms.observe((self.clock.now() - turn.submitted_s) * 1000)
                partial.append(item.text)
                await sink.send(turn.next_event_id(), "token", {"delta": item.text})
        raise ProviderProtocolError("the provider stream ended without a completion")  # pragma: no cover

    def _messages(self, history: list[MessageRecord]) -> list[Message]:
        return [{"role": m.role, "content": m.content} for m in history if m.role == "user" or m.status == "completed"]

    def _message(
        self, turn: Turn, role: Any, content: str, status: Any, usage: dict[str, int] | None = None
    ) -> MessageRecord:
        return MessageRecord(
            session_id=turn.session_id,
            turn_id=turn.turn_id,
            role=role,
            content=content,
            status=status,
            usage=usage,
            created_at_ms=wall_ms(),
        )

    async def _finish(
        self, turn: Turn, sink: TurnSink, name: str, data: dict[str, Any], partial: list[str] | None
    ) -> None:
        """Record the terminal event first (synchronously), then try to deliver it."""
        turn.finishing = True  # from here a cancel would only cut the terminal event short
        outcome = name.removeprefix("turn.")
        if partial is not None:
            data = {"turn_id": turn.turn_id, **data}
        if turn.run_id is not None:
            data = {**data, "run_id": turn.run_id}
        if data.get("reason") != "session_deleted":  # nothing may outlive a deleted session
            if partial is not None:
                self.store.add_message(self._message(turn, "assistant", "".join(partial), outcome))
            self._record_event(turn, name, data)
        duration_ms = (self.clock.now() - turn.submitted_s) * 1000
        self.metrics.observe_turn(outcome, duration_ms)
        log.info(
            "turn session=%s turn=%s outcome=%s reason=%s duration_ms=%.1f",
            turn.session_id,
            turn.turn_id,
            outcome,
            data.get("reason", "-"),
            duration_ms,
        )
        if data.get("reason") == "client_disconnected":
            return  # nobody to tell
        with suppress(ConnectionError):  # the client left just now; the outcome is stored all the same
            await sink.send(turn.next_event_id(), name, data)

    def _record_event(self, turn: Turn, name: str, data: dict[str, Any]) -> None:
        self.store.add_event(
            EventRecord(session_id=turn.session_id, turn_id=turn.turn_id, type=name, data=data, created_at_ms=wall_ms())
        )

    # -- shutdown -------------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> None:
        """Stop admitting, let running turns finish (bounded), then cancel the rest."""
        self.accepting = False
        if not await self._wait_idle(timeout_s):
            for turn_id in list(self._turns):
                self._cancel_task(turn_id, "shutdown")
            await self._wait_idle(5.0)
        if self._timer is not None:
            self._timer.cancel()
        if self._lag_timer is not None:
            self._lag_timer.cancel()

    async def _wait_idle(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


class _PermittedProvider:
    """A provider whose every stream first takes a kernel permit, and gives it back at the end."""

    def __init__(self, runtime: Runtime, provider: Provider) -> None:
        self._runtime = runtime
        self._provider = provider

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        stream_id = new_id("stream")
        await self._runtime.acquire_stream(stream_id)
        try:
            async with aclosing(self._provider.stream(request)) as items:
                async for item in items:
                    yield item
        finally:
            self._runtime.release_stream(stream_id)

    async def aclose(self) -> None:
        return None  # the wrapped provider belongs to the server
