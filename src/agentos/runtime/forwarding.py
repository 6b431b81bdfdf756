"""Turns that must wait, sent to the node that runs their session's turn (PostgreSQL + Redis).

A session's queue and its steering live in the kernel of the node whose turn runs: that kernel
alone knows when the turn ends, and it alone may promote the next one (no two turns of a
session at once) or hand a steered message to the running agent (exactly once). So a turn with
`on_busy` enqueue or steer that reaches a node where the session is idle, while PostgreSQL says
another node runs its turn, is not started here (that would fence the running turn out): this
node asks the others, on the bus channel `turn-forward`, to admit it there, and streams its
events from there (`TurnStreams`, as any follower on another node does).

- The asking node subscribes to the turn's event channel first, then sends the request (its
  own turn id, input, strategy, key) and waits for one reply on `turn-reply:{node}`, bounded
  by `ASK_S`. The node whose kernel has an active, live turn of that session (not one fenced
  out or being cancelled) admits it through its own kernel, exactly as a local turn: it is
  queued (`turn.queued`), steered, or refused (429 `turn_queue_full`, 409...), and replies
  with the outcome. It runs the turn in a task of its own and publishes every event of it.
- No reply in time (the running node died, Redis is away, the turn ended meanwhile): the
  asking node reads PostgreSQL again. An idle session runs the turn here, with a new id, after
  a cancel of the old id is sent in case a reply was only late; a session still busy elsewhere
  refuses it with `409 turn_in_progress`, as without a bus.
- A cancel by id (`DELETE /v1/sessions/{id}/turns/{turn_id}`, or the client of a forwarded turn
  leaving) goes the same way: the node where the turn lives cancels it and replies. So does
  "alive": a forwarded turn quiet for `coordination.forward_quiet_s` (queued behind a long
  turn) is asked after; when no node says it lives (twice), its stream ends `turn.failed`
  `node_lost`.

What is not guaranteed: a queued turn lives in the memory of the node that runs its session's
turn, as on one node. If that node dies, the turns queued there are lost with it (nothing of
them was written but `turn.queued`); their clients hear `node_lost` within about `forward_quiet_s` + 5 s.

Two rooms here: `TurnForwarding` is the wire (requests and replies on the bus), and
`ForwardedTurns` the turns that cross it, asked for by `agentos.runtime.turns.Turns`, which it
calls back through the small `TurnHost` protocol to admit and run the turns other nodes send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from agentos.clock import Clock
from agentos.coordination.bus import reading
from agentos.coordination.node import node_id
from agentos.errors import (
    AdmissionRejected,
    AgentOSError,
    Conflict,
    NotFound,
    RequestError,
    ShuttingDown,
    StoreUnavailable,
    TurnInProgress,
)
from agentos.ids import new_id
from agentos.kernel import ON_BUSY, OnBusy
from agentos.runtime.streams import Following, TurnStreams
from agentos.runtime.turn import TERMINAL_EVENTS, Turn, TurnSink

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus

log = logging.getLogger("agentos.turns")

CHANNEL = "turn-forward"
ASK_S = 2.0  # how long the asking node waits for the running node's reply
_NODE_LOST = "the node that held this turn is gone, and the turn with it; send it again"


def reply_channel(node: str) -> str:
    return f"turn-reply:{node}"


class Forwarded(msgspec.Struct, frozen=True):
    """A turn (or a cancel of one) for the node that runs its session's turn."""

    request_id: str
    origin: str  # the asking node: the reply goes to its channel
    kind: str  # "turn", "cancel", or "alive" (is the turn still live there?)
    tenant_id: str
    session_id: str
    turn_id: str
    input: str = ""
    on_busy: str = ""
    key_id: str = ""


class Reply(msgspec.Struct, frozen=True):
    """Admitted (`status` 0) or refused: the error the running node raised, to raise again."""

    request_id: str
    node: str
    status: int = 0
    code: str = ""
    message: str = ""
    retry_after_s: int | None = None
    turn_id: str | None = None  # `turn_in_progress`: the running turn


@dataclass(frozen=True, slots=True)
class ForwardingStatistics:
    asked_total: int  # requests this node sent (turns and cancels)
    unanswered_total: int  # of them, those no node answered in time
    answered_total: int  # requests of other nodes this node answered


# Serves a request from another node: its reply, or None when this node is not the one.
Serve = Callable[[Forwarded], Awaitable[Reply | None]]

_encode = msgspec.msgpack.Encoder().encode
_decode_request = msgspec.msgpack.Decoder(Forwarded).decode
_decode_reply = msgspec.msgpack.Decoder(Reply).decode


class TurnForwarding:
    """Sends turns to the node running their session's turn, and serves the other nodes'.

    Without a bus it is off (`available` False): a cluster without Redis refuses such turns."""

    def __init__(self, bus: Bus | None, serve: Serve, *, node: str | None = None) -> None:
        """`node`: this node's id (`node_id()`; tests name two nodes in one process)."""
        self._bus = bus
        self._serve = serve
        self._node = node or node_id()
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next = 0
        self._asked = self._answered = self._unanswered = 0

    @property
    def available(self) -> bool:
        return self._bus is not None and self._bus.connected

    async def start(self) -> None:
        if self._bus is not None:
            unreadable = "turn forwarding: an unreadable %s was ignored"
            on_request = reading(_decode_request, self._on_request, log, unreadable % "request")
            await self._bus.subscribe(CHANNEL, on_request)
            on_reply = reading(_decode_reply, self._on_reply, log, unreadable % "reply")
            await self._bus.subscribe(reply_channel(self._node), on_reply)

    async def ask(self, request: Forwarded) -> Reply | None:
        """Send `request` and wait (`ASK_S`) for the reply of the node it concerns; None if none came."""
        if self._bus is None:
            return None
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = future
        self._asked += 1
        try:
            self._bus.publish(CHANNEL, _encode(request))
            async with asyncio.timeout(ASK_S):
                return await future
        except TimeoutError:
            self._unanswered += 1
            return None
        finally:
            self._waiting.pop(request.request_id, None)

    def request(self, kind: str, tenant_id: str, session_id: str, turn_id: str, **fields: str) -> Forwarded:
        self._next += 1
        request_id = f"{self._node}:{self._next}"
        return Forwarded(request_id, self._node, kind, tenant_id, session_id, turn_id, **fields)

    def tell(self, request: Forwarded) -> None:
        """Send `request` without waiting for a reply (a cancel nobody waits for)."""
        if self._bus is not None:
            self._bus.publish(CHANNEL, _encode(request))

    def _on_request(self, request: Forwarded) -> None:
        if request.origin == self._node:
            return
        task = asyncio.get_running_loop().create_task(self._answer(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: Forwarded) -> None:
        reply = await self._serve(request)
        if reply is not None and self._bus is not None:
            self._answered += 1
            self._bus.publish(reply_channel(request.origin), _encode(reply))

    def _on_reply(self, reply: Reply) -> None:
        future = self._waiting.get(reply.request_id)
        if future is not None and not future.done():
            future.set_result(reply)

    def statistics(self) -> ForwardingStatistics:
        return ForwardingStatistics(self._asked, self._unanswered, self._answered)

    def admitted(self, request: Forwarded) -> Reply:
        return Reply(request.request_id, self._node)

    def refused(
        self, request: Forwarded, status: int, code: str, message: str, retry_after_s: int | None, turn_id: str | None
    ) -> Reply:
        return Reply(request.request_id, self._node, status, code, message, retry_after_s, turn_id)


class TurnHost(Protocol):
    """What forwarding needs of this node's turns (`agentos.runtime.turns.Turns`): it admits and
    runs the turns other nodes ask for, exactly as local ones, and cancels them by id."""

    def get(self, turn_id: str) -> Turn | None: ...

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        text: str,
        *,
        key_id: str = "",
        on_busy: OnBusy | None = None,
        turn_id: str | None = None,
        forward: bool = True,
    ) -> Turn: ...

    async def run(self, turn: Turn, sink: TurnSink) -> None: ...

    def cancel_by_id(self, turn_id: str) -> bool: ...

    async def running_elsewhere(self, tenant_id: str, session_id: str) -> str | None: ...

    def runs_here(self, tenant_id: str, session_id: str) -> bool: ...


class ForwardedTurns:
    """The turns that cross nodes: those this node asks another to admit and run (then relays
    their events to the client here), and those other nodes ask this node to run."""

    def __init__(
        self,
        turns: TurnHost,
        clock: Clock,
        streams: TurnStreams | None,
        bus: Bus | None,
        *,
        fencing: bool,
        quiet_s: float = 15.0,
    ) -> None:
        """`fencing`: the store knows which node runs a session's turn (PostgreSQL); without it
        no turn crosses nodes. `quiet_s`: a turn run by another node that sends nothing this
        long is asked after (is it still alive there?)."""
        self._turns = turns
        self._clock = clock
        self._streams = streams
        self._fencing = fencing
        self._quiet_s = quiet_s
        self._link = TurnForwarding(bus, self._serve)
        self._elsewhere: dict[str, Following] = {}  # turns asked here, admitted and run by another node
        self._serving: set[asyncio.Task[None]] = set()  # turns other nodes asked for, run here

    async def start(self) -> None:
        await self._link.start()

    def statistics(self) -> ForwardingStatistics:
        return self._link.statistics()

    async def cancel(self, tenant_id: str, session_id: str, turn_id: str) -> bool:
        """Cancel a turn of the session by id on whichever other node it lives; whether one did."""
        if not self._fencing or not self._link.available:
            return False
        reply = await self._link.ask(self._link.request("cancel", tenant_id, session_id, turn_id))
        return reply is not None and reply.status == 0

    def relays(self, turn_id: str) -> bool:
        """Whether `forward` sent this turn to another node: `relay` streams it from there."""
        return turn_id in self._elsewhere

    async def forward(
        self, tenant_id: str, session_id: str, text: str, on_busy: OnBusy, key_id: str, agent: str | None
    ) -> Turn | None:
        """A turn that must wait, in a session idle here that runs a turn on another node: that
        node admits it (queued or steered by its kernel) and runs it; this node follows it. None:
        not forwarded (one node, no bus, busy here, idle everywhere, or no reply: `Turns.start` goes
        on, and refuses it if the session is still busy on another node).

        Raises: the running node's refusal (AdmissionRejected `turn_queue_full`, TurnInProgress...);
            StoreUnavailable."""
        if self._streams is None or not self._link.available:
            return None
        if await self._turns.running_elsewhere(tenant_id, session_id) is None:
            return None  # one node, busy here (the kernel decides), or idle everywhere
        turn = Turn(new_id("turn"), tenant_id, session_id, text, self._clock.now(), agent)
        following = await self._streams.open(tenant_id, session_id, turn.turn_id, local=False)  # before asking
        ask = self._link.request
        reply = await self._link.ask(
            ask("turn", tenant_id, session_id, turn.turn_id, input=text, on_busy=on_busy, key_id=key_id)
        )
        if reply is not None and reply.status == 0:
            self._elsewhere[turn.turn_id] = following
            return turn
        following.close()
        if reply is not None:
            raise _forward_refusal(session_id, reply)
        # No reply: the running node is gone or the turn just ended. Should the reply only be
        # late, the turn admitted there is cancelled: it must not run besides one started here.
        self._link.tell(ask("cancel", tenant_id, session_id, turn.turn_id))
        return None

    async def _serve(self, request: Forwarded) -> Reply | None:
        """Another node's turn (or cancel) for a session whose turn runs here; None: not ours."""
        if request.kind in ("cancel", "alive"):
            turn = self._turns.get(request.turn_id)
            if turn is None or (turn.tenant_id, turn.session_id) != (request.tenant_id, request.session_id):
                return None
            if request.kind == "cancel":
                self._turns.cancel_by_id(request.turn_id)
            return self._link.admitted(request)
        if request.on_busy not in ON_BUSY or not self._turns.runs_here(request.tenant_id, request.session_id):
            return None
        try:
            turn = await self._turns.start(
                request.tenant_id,
                request.session_id,
                request.input,
                key_id=request.key_id,
                on_busy=request.on_busy,  # checked against ON_BUSY just above
                turn_id=request.turn_id,
                forward=False,
            )
        except RequestError as exc:
            return self._link.refused(request, exc.status, exc.code, str(exc), exc.retry_after_s, exc.turn_id)
        except AgentOSError as exc:  # the store away: the asking node's client may retry
            return self._link.refused(request, 503, "store_unavailable", str(exc), 1, None)
        if self._streams is not None:
            self._streams.followed_elsewhere(turn.turn_id)
        task = asyncio.create_task(self._turns.run(turn, _Elsewhere()))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        return self._link.admitted(request)

    async def relay(self, turn: Turn, sink: TurnSink) -> None:
        """Stream a turn another node runs to this node's client. A quiet while (a queued turn
        waits, perhaps behind a human) asks that node whether the turn still lives there: if no
        node says so, its node died with it (`node_lost`). The client leaving (or this task
        cancelled) cancels it there."""
        following, last, ended = self._elsewhere[turn.turn_id], 0, False
        try:
            while not ended:
                last, ended = await self._pump(turn, following, sink, last, self._quiet_s)
                if ended or await self._lives_elsewhere(turn):
                    continue
                # Gone from every node; it may have ended just before, its end missed live: the store says.
                last, ended = await self._pump(turn, following, sink, last, 0.0)
                if not ended:
                    data = {"turn_id": turn.turn_id, "reason": "node_lost", "message": _NODE_LOST}
                    ended = True
                    await sink.send(f"{turn.turn_id}:{last}", "turn.failed", data)
        except (asyncio.CancelledError, ConnectionError) as exc:
            if not ended:
                self._link.tell(self._link.request("cancel", turn.tenant_id, turn.session_id, turn.turn_id))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            following.close()
            self._elsewhere.pop(turn.turn_id, None)

    async def _pump(
        self, turn: Turn, following: Following, sink: TurnSink, last: int, quiet_s: float
    ) -> tuple[int, bool]:
        """Send the turn's events after `last` until its end, or until it was quiet `quiet_s`
        (0: only what is stored now); returns the last seq sent and whether it ended."""
        async with aclosing(following.events(last, stall_s=quiet_s)) as events:
            async for event in events:
                if event.seq == 0:  # quiet
                    break
                last = event.seq
                await sink.send(f"{turn.turn_id}:{event.seq}", event.name, event.data)
                if event.name in TERMINAL_EVENTS:
                    return last, True
        return last, False

    async def _lives_elsewhere(self, turn: Turn) -> bool:
        """Whether a node says the turn is live there (asked twice: one lost message is no death)."""
        for _ in range(2):
            request = self._link.request("alive", turn.tenant_id, turn.session_id, turn.turn_id)
            if await self._link.ask(request) is not None:
                return True
        return False


class _Elsewhere:
    """The sink of a turn another node asked for: its client is there, and hears every event
    through the turn's stream (`TurnStreams`), so nothing is sent from here."""

    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        pass


def _forward_refusal(session_id: str, reply: Reply) -> AgentOSError:
    """The error the running node raised for a forwarded turn, raised again here."""
    if reply.code == "turn_in_progress" and reply.turn_id is not None:
        return TurnInProgress(session_id, reply.turn_id)
    if reply.status == 429:
        return AdmissionRejected(reply.retry_after_s or 1, code=reply.code)
    if reply.status == 404:
        return NotFound(reply.message, code=reply.code)
    if reply.code == "store_unavailable":
        return StoreUnavailable(reply.message)
    if reply.status >= 500:
        return ShuttingDown(reply.message)
    return Conflict(reply.message, code=reply.code)
