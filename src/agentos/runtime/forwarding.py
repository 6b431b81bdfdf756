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
  "alive": a forwarded turn quiet for `QUIET_S` (queued behind a long turn) is asked after; when
  no node says it lives (twice), its stream ends `turn.failed` `node_lost`.

What is not guaranteed: a queued turn lives in the memory of the node that runs its session's
turn, as on one node. If that node dies, the turns queued there are lost with it (nothing of
them was written but `turn.queued`); their clients hear `node_lost` within about 20 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from agentos.coordination.node import node_id

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus

log = logging.getLogger("agentos.turns")

CHANNEL = "turn-forward"
ASK_S = 2.0  # how long the asking node waits for the running node's reply


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
            await self._bus.subscribe(CHANNEL, self._on_request)
            await self._bus.subscribe(reply_channel(self._node), self._on_reply)

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

    def _on_request(self, data: bytes) -> None:
        try:
            request = _decode_request(data)
        except msgspec.DecodeError:
            log.warning("turn forwarding: an unreadable request was ignored")
            return
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

    def _on_reply(self, data: bytes) -> None:
        try:
            reply = _decode_reply(data)
        except msgspec.DecodeError:
            log.warning("turn forwarding: an unreadable reply was ignored")
            return
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
