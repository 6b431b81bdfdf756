"""The runtime: the async driver around the kernel.

It is the only caller of `Kernel.handle` (synchronous, so atomic on the event loop: no lock),
carries out the commands it returns, and runs one task per turn. It keeps one timer, set to the
kernel's next deadline, and feeds `Tick` when it fires.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from agentos.clock import Clock, MonotonicClock, wall_ms
from agentos.config import Settings
from agentos.errors import (
    AdmissionRejected,
    ProviderError,
    ProviderLimitTimeout,
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
    Tick,
    TurnEnded,
    TurnSubmitted,
)
from agentos.metrics import Metrics
from agentos.providers.base import ChatRequest, Completion, Message, Provider
from agentos.runtime.turn import Turn
from agentos.store.base import Store
from agentos.store.records import EventRecord, MessageRecord, SessionRecord

log = logging.getLogger("agentos.turns")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Runtime:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        provider: Provider,
        metrics: Metrics,
        *,
        clock: Clock | None = None,
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
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._history_limit = k.history_max_messages
        self.accepting = True
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
                turn = self._turns.get(turn_id)
                if turn is not None and turn.permit is not None and not turn.permit.done():
                    turn.permit.set_result(None)
            case CancelTurn(turn_id, reason):
                self._cancel_task(turn_id, reason)
            case FailTurn(turn_id, reason):
                turn = self._turns.get(turn_id)
                if turn is not None and turn.permit is not None and not turn.permit.done():
                    turn.permit.set_exception(ProviderLimitTimeout("no provider permit in time"))
            case EvictSession(session_id):
                self.store.forget_session(session_id)
            case AcceptTurn() | RejectTurn():
                pass  # answered by the caller of _handle

    def _cancel_task(self, turn_id: str, reason: str) -> None:
        turn = self._turns.get(turn_id)
        if turn is None or turn.finishing or turn.task is None:
            return
        turn.cancel_reason = reason
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
        self._handle(Tick())

    # -- sessions -------------------------------------------------------------------------------

    async def create_session(self, agent: str, metadata: dict[str, Any]) -> SessionRecord:
        record = SessionRecord(session_id=new_id("ses"), agent=agent, metadata=metadata, created_at_ms=wall_ms())
        await self.store.create_session(record)
        self._handle(SessionOpened(record.session_id))
        return record

    async def get_session(self, session_id: str) -> SessionRecord:
        record = await self.store.get_session(session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def ensure_loaded(self, session_id: str) -> None:
        """Bring an evicted session back into memory; 404 if the store does not know it."""
        if self.kernel.has_session(session_id):
            return
        await self.get_session(session_id)
        if not self.kernel.has_session(session_id):
            self._handle(SessionOpened(session_id))

    async def delete_session(self, session_id: str) -> None:
        if not await self.store.delete_session(session_id):
            raise SessionNotFound(session_id)
        self._handle(SessionClosed(session_id))

    # -- turns ----------------------------------------------------------------------------------

    async def start_turn(self, session_id: str, text: str) -> Turn:
        await self.ensure_loaded(session_id)
        turn = Turn(new_id("turn"), session_id, text, self.clock.now())
        self._turns[turn.turn_id] = turn
        commands = self._handle(TurnSubmitted(session_id, turn.turn_id))
        if isinstance(commands[-1], RejectTurn) and len(commands) == 1:
            del self._turns[turn.turn_id]
            raise AdmissionRejected(commands[0].retry_after_s)
        if not any(isinstance(c, GrantPermit) and c.turn_id == turn.turn_id for c in commands):
            turn.permit = asyncio.get_running_loop().create_future()
        turn.task = asyncio.create_task(self._run(turn), name=turn.turn_id)
        return turn

    def cancel_turn(self, session_id: str, reason: str = "cancelled") -> str | None:
        """Cancel the session's running turn; returns its id, or None if none was running."""
        turn_id = self.kernel.active_turn(session_id)
        self._handle(CancelRequested(session_id, reason))
        return turn_id

    def drop_turn(self, turn: Turn, reason: str) -> None:
        """The client went away: cancel the turn if it is still running."""
        if turn.task is not None and not turn.task.done() and self.kernel.active_turn(turn.session_id) == turn.turn_id:
            self._handle(CancelRequested(turn.session_id, reason))

    @property
    def live_turns(self) -> Iterable[Turn]:
        return self._turns.values()

    async def _run(self, turn: Turn) -> None:
        partial: list[str] = []
        try:
            await self._run_steps(turn, partial)
        except asyncio.CancelledError:
            if turn.cancel_reason is None:  # the server itself is being cancelled: that wins
                self._finish(turn, "turn.cancelled", "cancelled", {"reason": "shutdown"}, partial)
                raise
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            self._finish(turn, "turn.cancelled", "cancelled", {"reason": turn.cancel_reason}, partial)
        except ProviderError as exc:
            self._finish(turn, "turn.failed", "failed", {"reason": exc.code, "message": str(exc)}, partial)
        except Exception as exc:
            log.exception("turn %s failed", turn.turn_id)
            self._finish(turn, "turn.failed", "failed", {"reason": "internal_error", "message": str(exc)}, partial)
        finally:
            self._handle(TurnEnded(turn.turn_id))
            self._turns.pop(turn.turn_id, None)

    async def _run_steps(self, turn: Turn, partial: list[str]) -> None:
        turn.emit("turn.started", {"turn_id": turn.turn_id, "session_id": turn.session_id})
        self._record_event(turn, "turn.started", {})
        await self.store.wait_space()
        self.store.add_message(self._message(turn, "user", turn.input, "completed"))
        history = await self.store.history(turn.session_id, limit=self._history_limit)
        if turn.permit is not None:
            await turn.permit
        try:
            completion = await self._stream(turn, self._messages(history), partial)
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
        self._finish(turn, "turn.completed", "completed", data, None)

    async def _stream(self, turn: Turn, messages: list[Message], partial: list[str]) -> Completion:
        first = True
        async for item in self.provider.stream(ChatRequest(messages)):
            if isinstance(item, Completion):
                return item
            if first:
                first = False
                self.metrics.ttft_ms.observe((self.clock.now() - turn.submitted_s) * 1000)
            partial.append(item.text)
            turn.emit("token", {"delta": item.text})
        raise ProviderError("the provider stream ended without a completion")  # pragma: no cover

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

    def _finish(self, turn: Turn, name: Any, outcome: str, data: dict[str, Any], partial: list[str] | None) -> None:
        """Record and emit the terminal event. Synchronous: safe inside cancellation handlers."""
        if partial is not None:
            self.store.add_message(self._message(turn, "assistant", "".join(partial), outcome))
            data = {"turn_id": turn.turn_id, **data}
        turn.emit(name, data)
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

    def _record_event(self, turn: Turn, name: str, data: dict[str, Any]) -> None:
        self.store.add_event(
            EventRecord(session_id=turn.session_id, turn_id=turn.turn_id, type=name, data=data, created_at_ms=wall_ms())
        )

    # -- shutdown -------------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> None:
        """Stop admitting, let running turns finish (bounded), then cancel the rest."""
        self.accepting = False
        tasks = [t.task for t in self._turns.values() if t.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for turn in list(self._turns.values()):
                self._cancel_task(turn.turn_id, "shutdown")
            if pending:
                await asyncio.wait(pending, timeout=5)
        if self._timer is not None:
            self._timer.cancel()
