"""Turns: admission, the turn's task, and how every turn ends.

A turn runs in the task of whoever calls `run` (for SSE and JSON the request's own handler
task: no extra task and no queue hop per token). Whatever happens, it ends with exactly one
terminal event (`turn.completed`, `turn.cancelled` or `turn.failed`), recorded before it is
sent (never shed; a completed turn's committed with its answer, `Store.commit_answer`), and
with `TurnEnded` fed to the kernel.

Across nodes (PostgreSQL): before its first write a turn takes its session's turn epoch and
announces it (`agentos.runtime.epochs`); another node's newer epoch cancels it like a local
last-wins, and a write the store refuses as stale (`StaleTurn`) ends it `turn.cancelled`
"superseded". A turn fenced out writes nothing more.

Cancellation: a first-party cancel (last-wins, DELETE, shutdown) sets `cancel_reason` and
cancels the task; the turn ends with `turn.cancelled` and the task goes on. Any other cancel
of the task (its client went away, the server is stopping) is recorded, then re-raised: if
both arrive together, the outside one wins and is never swallowed.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from agentos.clock import Clock, wall_ms
from agentos.errors import (
    AdmissionRejected,
    BudgetExceeded,
    ProviderError,
    SessionNotFound,
    ShuttingDown,
    StaleTurn,
    StoreUnavailable,
    TurnInProgress,
    new_error_id,
)
from agentos.ids import new_id
from agentos.kernel import (
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    DeliverSteer,
    GrantPermit,
    OnBusy,
    QueueTurn,
    RejectTurn,
    SteerClaimed,
    SteerTurn,
    TurnCancelRequested,
    TurnEnded,
    TurnState,
    TurnSubmitted,
)
from agentos.metrics import Metrics
from agentos.providers.base import Message
from agentos.runtime.agent_turn import AgentTurns
from agentos.runtime.chat import ChatTurns
from agentos.runtime.driver import Driver
from agentos.runtime.epochs import TurnEpochs
from agentos.runtime.forwarding import ForwardedTurns
from agentos.runtime.sessions import Sessions
from agentos.runtime.streams import PublishingSink, TurnStreams
from agentos.runtime.transcript import event, message, record_event
from agentos.runtime.turn import Outcome, Turn, TurnSink
from agentos.store.base import Store
from agentos.store.records import EventRecord, MessageRecord
from agentos.telemetry import NO_TRACING, Tracing

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus

log = logging.getLogger("agentos.turns")
_REPLACING = frozenset({"replace", "rollback"})  # strategies that never wait for a running turn


class Turns:
    def __init__(
        self,
        driver: Driver,
        store: Store,
        metrics: Metrics,
        clock: Clock,
        sessions: Sessions,
        chat: ChatTurns,
        agents: AgentTurns | None,
        streams: TurnStreams | None = None,
        bus: Bus | None = None,
        tracing: Tracing = NO_TRACING,
        forward_quiet_s: float = 15.0,
    ) -> None:
        self._tracing = tracing
        self._driver = driver
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._sessions = sessions
        self._chat = chat
        self._agents = agents
        self._streams = streams  # followers of a turn, here and on other nodes
        self._turns: dict[str, Turn] = {}
        self._by_owner: dict[tuple[str, str], int] = {}  # live turns in each end user's sessions
        self.accepting = True
        self.idle = asyncio.Event()  # set while no turn is live
        self.idle.set()
        driver.on(CancelTurn, self._on_cancel)
        driver.on(AcceptTurn, self._on_accept)
        driver.on(SteerTurn, self._on_steer)
        driver.on(DeliverSteer, self._on_deliver)
        self.epochs = TurnEpochs(driver, store, bus, self.get)
        # Turns that must wait for another node's turn of their session go there (with a bus).
        self.forwarding = ForwardedTurns(
            self, clock, streams, bus, fencing=self.epochs.fencing, quiet_s=forward_quiet_s
        )

    def __len__(self) -> int:
        return len(self._turns)

    def get(self, turn_id: str) -> Turn | None:
        """The turn if it is live on this node."""
        return self._turns.get(turn_id)

    def ids(self) -> list[str]:
        return list(self._turns)

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        text: str,
        *,
        prompt: list[Message] | None = None,
        tools: list[dict[str, Any]] | None = None,
        key_id: str = "",
        on_busy: OnBusy | None = None,
        turn_id: str | None = None,
        forward: bool = True,
        user_max_turns: int = 0,
    ) -> Turn:
        """Admit a turn in the tenant's session; `run` runs it. `key_id`: the key that asked
        (its model calls are counted against it: the usage ledger, the key's budget).
        `user_max_turns`: at most this many live turns in the sessions of the session's end user
        (`user_max_concurrent_turns`; 0: no cap; a session a tenant key opened has no user).
        `on_busy`: what it does if the session runs a turn (None: the session's default,
        docs/conversations.md); a queued turn is admitted and `run` waits for its turn. With
        PostgreSQL and a bus, such a turn for a session whose turn runs on another node is
        admitted there (`forward`, `agentos.runtime.forwarding`) and `run` streams it from there.
        `turn_id`: the id another node chose for a turn it forwarded here.

        Raises:
            ShuttingDown: the server is draining.
            SessionNotFound: no such session (or another tenant's).
            AdmissionRejected: over `kernel.max_in_flight_turns` (code "overloaded"), the
                session's tenant's `max_concurrent_turns` ("tenant_concurrent_turns") or the
                session's queue bound ("turn_queue_full").
            TurnInProgress: `on_busy` "reject" and the session runs a turn; or any strategy
                but replace and rollback while it runs one on another node (PostgreSQL) that
                could not be asked (no bus, no reply).
            StoreUnavailable: that other node's turn could not be looked up.
        """
        if not self.accepting:
            raise ShuttingDown("the server is shutting down")
        await self._sessions.ensure_loaded(tenant_id, session_id)
        on_busy = on_busy or self._sessions.on_busy_of(session_id)
        agent = self._sessions.agent_of(session_id) if self._agents is not None else None
        owner = self._sessions.owner_of(session_id)
        if owner is not None and user_max_turns and self._by_owner.get((tenant_id, owner), 0) >= user_max_turns:
            raise AdmissionRejected(self._driver.kernel.limits.retry_after_s, code="user_concurrent_turns")
        if on_busy not in _REPLACING:
            if forward and prompt is None and tools is None:
                elsewhere = await self.forwarding.forward(tenant_id, session_id, text, on_busy, key_id, agent)
                if elsewhere is not None:
                    return elsewhere
            await self._check_elsewhere(tenant_id, session_id)
        turn_id = turn_id or new_id("turn")
        await self._hold(turn_id, tenant_id, owner, user_max_turns)
        turn = Turn(turn_id, tenant_id, session_id, text, self._clock.now(), agent)
        turn.prompt, turn.tools, turn.key_id = prompt, tools, key_id
        turn.owner = owner
        self._turns[turn.turn_id] = turn
        if owner is not None:
            self._by_owner[(tenant_id, owner)] = self._by_owner.get((tenant_id, owner), 0) + 1
        self.idle.clear()
        submitted = TurnSubmitted(session_id, turn.turn_id, agent is None, tenant_id, on_busy)
        commands = self._driver.handle(submitted)
        if isinstance(commands[0], RejectTurn):
            self._forget(turn)
            self._driver.release_turn(turn_id)  # held above, never started
            raise _refusal(session_id, commands[0])
        turn.rolls_back = [c.turn_id for c in commands if isinstance(c, CancelTurn) and c.rollback]
        turn.rollback_elsewhere = on_busy == "rollback" and not turn.rolls_back and self.epochs.fencing
        queued = next((c for c in commands if isinstance(c, QueueTurn)), None)
        if queued is not None:  # it waits its turn: `_on_accept` resolves the future
            turn.queued = (queued.ahead, asyncio.get_running_loop().create_future())
        elif agent is None and GrantPermit(turn.turn_id) not in commands:
            turn.permit = self._driver.waits_for_permit(turn.turn_id)
        if self._tracing.on:  # on the request's span: admitted, and whether a permit was free
            self._tracing.event(
                "agentos.turn.admitted", {"agentos.turn.id": turn_id, "agentos.permit.waits": turn.permit is not None}
            )
        return turn

    async def _hold(self, turn_id: str, tenant_id: str, owner: str | None, user_max_turns: int) -> None:
        """The turn's places in a cluster: under its tenant's `max_concurrent_turns` and its end
        user's `user_max_concurrent_turns` over every node (one attribute test without a cluster).

        Raises: AdmissionRejected (`tenant_concurrent_turns`, `user_concurrent_turns`)."""
        driver = self._driver
        if driver.turn_holds is not None and not await driver.hold_turn(turn_id, tenant_id):
            raise AdmissionRejected(driver.kernel.limits.retry_after_s, code="tenant_concurrent_turns")
        if driver.user_turn_holds is not None and not await driver.hold_user_turn(
            turn_id, tenant_id, owner, user_max_turns
        ):
            driver.release_turn(turn_id)  # the tenant's place, taken just above
            raise AdmissionRejected(driver.kernel.limits.retry_after_s, code="user_concurrent_turns")

    async def _check_elsewhere(self, tenant_id: str, session_id: str) -> None:
        """A turn that must not replace: refuse it if the session runs a turn on another node
        (PostgreSQL). Queues and steers are this node's kernel's, so a session busy elsewhere
        refuses them too, rather than starting a turn that would fence the running one out.

        Raises: TurnInProgress; StoreUnavailable."""
        running = await self.running_elsewhere(tenant_id, session_id)
        if running is not None:
            raise TurnInProgress(session_id, running)

    async def running_elsewhere(self, tenant_id: str, session_id: str) -> str | None:
        """The id of the session's turn when another node runs it (PostgreSQL); None on one node,
        when the session is busy here (the kernel decides), or idle everywhere.

        Raises: StoreUnavailable."""
        if not self.epochs.fencing or self._driver.kernel.active_turn(session_id) is not None:
            return None
        running = await self._store.running_turn(tenant_id, session_id)
        return None if running is None or running in self._turns else running

    def runs_here(self, tenant_id: str, session_id: str) -> bool:
        """This node runs the session's current turn: live, not fenced out, not being cancelled."""
        turn_id = self._driver.kernel.active_turn(session_id)
        turn = None if turn_id is None else self._turns.get(turn_id)
        if turn is None or turn.tenant_id != tenant_id:
            return False
        return not turn.fenced_out and turn.cancel_reason is None

    def cancel(self, session_id: str, reason: str = "cancelled") -> str | None:
        """Cancel the session's running turn; returns its id, or None if none was running."""
        turn_id = self._driver.kernel.active_turn(session_id)
        self._driver.handle(CancelRequested(session_id, reason))
        return turn_id

    async def cancel_anywhere(self, tenant_id: str, session_id: str) -> str | None:
        """Cancel the session's running turn on whichever node runs it; its id, or None."""
        turn_id = self.cancel(session_id)
        if turn_id is not None or not self.epochs.fencing:
            return turn_id
        return await self.epochs.cancel(tenant_id, session_id)

    def cancel_by_id(self, turn_id: str) -> bool:
        """Cancel one live turn of this node by id (a queued one leaves its queue); whether it was live."""
        if turn_id not in self._turns:
            return False
        self._driver.handle(TurnCancelRequested(turn_id))
        return True

    def cancel_all(self, reason: str) -> None:
        for turn_id in list(self._turns):
            self._on_cancel(CancelTurn(turn_id, reason))

    async def run(self, turn: Turn, sink: TurnSink) -> None:
        """Run an admitted turn in the calling task, sending its events to `sink`."""
        if self.forwarding.relays(turn.turn_id):
            return await self.forwarding.relay(turn, sink)
        if not self._tracing.on:
            return await self._run(turn, sink)
        attributes = {"gen_ai.conversation.id": turn.session_id, "agentos.turn.id": turn.turn_id}
        if turn.agent is not None:
            attributes["gen_ai.agent.name"] = turn.agent
        with self._tracing.span("turn", attributes) as turn.span:
            await self._run(turn, sink)

    async def _run(self, turn: Turn, sink: TurnSink) -> None:
        turn.task = asyncio.current_task()
        partial: list[str] = []
        try:
            if turn.cancel_reason is not None:  # cancelled before it started running
                raise asyncio.CancelledError
            if turn.queued is not None and await self._wait_turn(turn, self._published(turn, sink)):
                data = {"steered_into": turn.steered_into}  # delivered: the agent turn answers it
                return await self._finish(turn, sink, "turn.completed", data, None)
            await self._begin(turn)
            outcome = await self._execute(turn, self._published(turn, sink), partial)
            await self._finish(turn, sink, outcome.name, outcome.data, None, outcome.answer)
        except asyncio.CancelledError:
            if turn.answered:  # cancelled once its answer was committing or sent: it completed
                raise
            await self._cancelled(turn, sink, partial)
        except StaleTurn:  # a newer turn of the session started on another node: it wins
            turn.fenced_out = True
            await self._finish(turn, sink, "turn.cancelled", {"reason": "superseded"}, partial)
        except SessionNotFound:  # deleted on another node after this turn was admitted
            await self._finish(turn, sink, "turn.cancelled", {"reason": "session_deleted"}, None)
        except ConnectionError:
            await self._finish(turn, sink, "turn.cancelled", {"reason": "client_disconnected"}, partial)
        except ProviderError as exc:
            await self._finish(turn, sink, "turn.failed", {"reason": exc.code, "message": str(exc)}, partial)
        except BudgetExceeded as exc:  # a call past what admission held (a longer conversation, a dearer target)
            data = {"reason": exc.code, "message": str(exc), "budget": exc.budget}
            await self._finish(turn, sink, "turn.failed", data, partial)
        except StoreUnavailable as exc:  # the database went away under the turn: nobody's bug
            # The outage itself is the store's two log lines; each turn's outcome line says the rest.
            log.debug("turn %s failed: %s", turn.turn_id, exc)
            data = {"reason": exc.code, "message": "the store cannot be reached; retry later"}
            await self._finish(turn, sink, "turn.failed", data, partial)
        except Exception:
            error_id = new_error_id()
            log.exception("turn %s failed (error_id=%s)", turn.turn_id, error_id)
            data = {"reason": "internal_error", "message": "internal server error", "error_id": error_id}
            await self._finish(turn, sink, "turn.failed", data, partial)
        finally:
            self._forget(turn)
            self._store.end_turn(turn.turn_id)  # a no-op if it completed (see _finish)
            self._driver.handle(TurnEnded(turn.turn_id))

    async def _begin(self, turn: Turn) -> None:
        """Take the session's turn epoch; a rollback then removes the turns it replaced from the
        transcript, before this turn reads it. With PostgreSQL the replaced turn may run on
        another node: it is the session's running turn just before the bump, which fences it out."""
        elsewhere = None
        if turn.rollback_elsewhere:
            elsewhere = await self._store.running_turn(turn.tenant_id, turn.session_id)
        await self.epochs.begin(turn)
        for rolled_back in [*turn.rolls_back, *([elsewhere] if elsewhere else [])]:
            await self._store.delete_turn_messages(turn.tenant_id, turn.session_id, rolled_back)

    async def _wait_turn(self, turn: Turn, sink: TurnSink) -> bool:
        """A queued turn: say so, then wait until the turns ahead of it are done (or it is
        cancelled: the task is, as for any turn). True: it was a steer, and its message was
        delivered into the running agent turn instead."""
        assert turn.queued is not None
        ahead, accepted = turn.queued
        data = {"turn_id": turn.turn_id, "ahead": ahead}
        await sink.send(turn.next_event_id(), "turn.queued", data)
        record_event(self._store, turn, "turn.queued", data)
        await accepted
        return turn.steered_into is not None

    def _on_steer(self, command: SteerTurn) -> None:
        """Offer the queued turn's message to the running agent turn's run. Its claim goes
        through the kernel, which decides once: delivered, or (the turn ended first) promoted."""
        turn, into = self._turns.get(command.turn_id), self._turns.get(command.into_turn_id)
        if turn is None or into is None or self._agents is None:
            return  # not offered: it waits its turn in the queue

        def claim() -> bool:
            delivered = DeliverSteer(command.turn_id, command.into_turn_id)
            return delivered in self._driver.handle(SteerClaimed(command.turn_id, command.into_turn_id))

        self._agents.steer(into, turn.input, claim)

    def _on_deliver(self, command: DeliverSteer) -> None:
        """The running agent turn took the queued turn's message: it joins the transcript (before
        that turn's answer) and the queued turn ends without running."""
        turn = self._turns.get(command.turn_id)
        if turn is None or turn.queued is None:
            return  # pragma: no cover - the kernel delivers only turns it still holds queued
        turn.steered_into = command.into_turn_id
        turn.asked = True
        self._store.add_message(message(turn, "user", turn.input, "completed"))
        accepted = turn.queued[1]
        if not accepted.done():
            accepted.set_result(None)

    def _on_accept(self, command: AcceptTurn) -> None:
        """A queued turn's turn came: it runs now (and waits for a permit if none was free)."""
        turn = self._turns.get(command.turn_id)
        if turn is None or turn.queued is None:
            return  # admitted at once: `start` saw it
        accepted = turn.queued[1]
        turn.queued = None
        if turn.agent is None and self._driver.kernel.turn_state(turn.turn_id) is TurnState.WAITING:
            turn.permit = self._driver.waits_for_permit(turn.turn_id)
        if not accepted.done():
            accepted.set_result(None)

    def _published(self, turn: Turn, sink: TurnSink) -> TurnSink:
        return sink if self._streams is None else PublishingSink(sink, self._streams, turn)

    async def _execute(self, turn: Turn, sink: TurnSink, partial: list[str]) -> Outcome:
        if turn.agent is not None and self._agents is not None:
            return await self._agents.run(turn, sink, partial)
        return await self._chat.run(turn, sink, partial)

    async def _cancelled(self, turn: Turn, sink: TurnSink, partial: list[str]) -> None:
        """End a cancelled turn; re-raise unless the cancel was only our own."""
        task = asyncio.current_task()
        outside = turn.cancel_reason is None or (task is not None and task.uncancel() > 0)
        if turn.cancel_reason is not None and self._agents is not None:
            await self._agents.stop(turn, turn.cancel_reason)
        reason = turn.cancel_reason or "client_disconnected"
        await self._finish(turn, sink, "turn.cancelled", {"reason": reason}, partial)
        if outside:
            raise asyncio.CancelledError

    def _on_cancel(self, command: CancelTurn) -> None:
        turn = self._turns.get(command.turn_id)
        if turn is None or turn.finishing:
            return
        turn.cancel_reason = command.reason
        turn.rollback = command.rollback
        if command.reason == "superseded":  # by the turn whose request is the current span
            turn.superseded_by = self._tracing.current_traceparent()
        if turn.task is not None:
            turn.task.cancel()

    def _forget(self, turn: Turn) -> None:
        if self._turns.pop(turn.turn_id, None) is not None and turn.owner is not None:
            key = (turn.tenant_id, turn.owner)
            left = self._by_owner.pop(key) - 1
            if left:
                self._by_owner[key] = left
        if not self._turns:
            self.idle.set()

    async def _finish(
        self,
        turn: Turn,
        sink: TurnSink,
        name: str,
        data: dict[str, Any],
        partial: list[str] | None,
        answer: MessageRecord | None = None,
    ) -> None:
        """Record the terminal event first, then try to deliver it.

        `partial`: the tokens streamed so far, stored as the answer of a turn that did not
        complete; None when there is none to store. `answer`: a completed turn's, committed
        with its terminal event before the client hears of either (a crash after the client
        was told leaves both stored); a failure to commit raises, as the turn's own writes do.
        """
        turn.finishing = True  # from here a cancel would only cut the terminal event short
        outcome = name.removeprefix("turn.")
        if self._tracing.on:
            _trace_outcome(turn, outcome, data)
        data = {"turn_id": turn.turn_id, **data}
        if turn.run_id is not None:
            data["run_id"] = turn.run_id
        event_id = turn.next_event_id()
        # Nothing may outlive a deleted session; a turn fenced out by a newer epoch would only
        # have its writes refused (the kernel's "superseded" has one whenever the store fences).
        fenced = self.epochs.fencing and (turn.fenced_out or turn.cancel_reason == "superseded")
        if answer is not None:  # one commit of both, in the group commit the answer joins anyway
            # From here the turn completed, whatever cancels its task: a cancel must not store
            # its partial answer over the committed one (`run` re-raises when `answered`).
            turn.answered = True
            try:
                await self._commit(turn, answer, event(turn, name, data))
            except asyncio.CancelledError:  # its client left: both are queued, and will be stored
                self._ended(turn, name, data)
                raise
            except Exception:  # refused (fenced out, store down): nothing was committed
                turn.answered = False
                raise
            self._store.end_turn(turn.turn_id, pending_writes=False)  # its answer passed the fence
        elif data.get("reason") != "session_deleted" and not fenced:
            # A closed store refuses the records; the client is still told how the turn ended.
            with suppress(StoreUnavailable):
                partial_answer = partial is not None and turn.asked and not turn.rollback  # none without its question
                if partial_answer:
                    self._store.add_message(message(turn, "assistant", "".join(partial or ()), outcome))
                record_event(self._store, turn, name, data)
                if not partial_answer:  # nothing says it ended: the store records that (PostgreSQL: other nodes ask)
                    self._store.end_turn(turn.turn_id, answered=False)
        self._ended(turn, name, data)
        if data.get("reason") == "client_disconnected":
            return  # nobody to tell
        with suppress(ConnectionError):  # the client left just now; the outcome is stored all the same
            await sink.send(event_id, name, data)

    async def _commit(self, turn: Turn, answer: MessageRecord, ended: EventRecord) -> None:
        """The answer and its terminal event in one commit: the one store write a client waits
        on, traced as `agentos.store.commit` when it took `telemetry.slow_commit_ms` or more (a
        slow disk or database shows; the usual millisecond commit costs no span)."""
        if not self._tracing.on:
            return await self._store.commit_answer(answer, ended)
        started_ms = wall_ms()
        await self._store.commit_answer(answer, ended)
        ended_ms = wall_ms()
        if ended_ms - started_ms >= self._tracing.slow_commit_ms:
            attributes = {"db.operation.name": "commit_answer"}
            self._tracing.record("agentos.store.commit", attributes, start_ms=started_ms, end_ms=ended_ms)

    def _ended(self, turn: Turn, name: str, data: dict[str, Any]) -> None:
        """Tell the turn's followers how it ended, and count and log it."""
        if self._streams is not None:  # followers hear how it ended, whether or not its client is there
            self._streams.publish(turn, name, data)
        outcome = name.removeprefix("turn.")
        duration_ms = (self._clock.now() - turn.submitted_s) * 1000
        self._metrics.observe_turn(outcome, duration_ms)
        log.info(
            "turn session=%s turn=%s outcome=%s reason=%s duration_ms=%.1f",
            turn.session_id,
            turn.turn_id,
            outcome,
            data.get("reason", "-"),
            duration_ms,
        )


def _refusal(session_id: str, rejected: RejectTurn) -> Exception:
    if rejected.code == "turn_in_progress":
        return TurnInProgress(session_id, rejected.running_turn_id)
    return AdmissionRejected(rejected.retry_after_s, code=rejected.code)


def _trace_outcome(turn: Turn, outcome: str, data: dict[str, Any]) -> None:
    turn.span.set_attribute("agentos.turn.outcome", outcome)
    reason = data.get("reason")
    if reason:
        turn.span.set_attribute("agentos.turn.reason", str(reason))
    if outcome == "failed":
        turn.span.record_error(str(reason or "failed"))
    if turn.superseded_by:  # last-wins: a link to the request whose turn took over
        turn.span.add_link(turn.superseded_by, {"agentos.link": "superseded_by"})
