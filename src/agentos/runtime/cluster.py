"""Cancels between nodes: the prompt half of last-wins across nodes.

The correct half is in the database: a turn's start bumps its session's turn epoch, and every
write of an older turn is refused from then on (`agentos.store.pg_fence`). That alone would
let a superseded turn on another node stream to its client (and spend provider tokens) until
its next write. So after a bump that fenced out a running turn (the bump names it) the node
publishes one message on the bus channel `cancel` (tenant, session, epoch, reason, node); every
node subscribes once at start, and a node running an older turn of that session cancels it at
once, exactly as local last-wins does: its stream ends `turn.cancelled` and its upstream
request is aborted. A turn whose session's last turn had ended publishes nothing: no node has
anything to stop, and every node would decode the message.

A lost message (Redis down, a reconnect) costs promptness, never correctness: the old turn
runs until its next write is refused, then ends `turn.cancelled` "superseded". At most one
message per turn start, batched by the bus with everything else: nothing per token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from agentos.coordination.bus import reading
from agentos.coordination.node import node_id

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus

log = logging.getLogger("agentos.cluster")

CHANNEL = "cancel"


class CancelMessage(msgspec.Struct, frozen=True, array_like=True):
    tenant_id: str
    session_id: str
    epoch: int  # the session's epoch after the bump: every turn with an older one must stop
    reason: str  # "superseded" (a newer turn started) or "cancelled" (DELETE .../turn)
    node: str  # the publisher, which has already cancelled its own turn of the session


# Called with each message from another node: cancel the local turn of the session if older.
OnCancel = Callable[[CancelMessage], None]

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(CancelMessage).decode


class CancelRelay:
    """Publishes this node's epoch bumps; hands the other nodes' to `on_cancel`.

    Without a bus (no `coordination.redis_url`) it does nothing: one node, or fencing only.
    """

    def __init__(self, bus: Bus | None, on_cancel: OnCancel) -> None:
        self._bus = bus
        self._on_cancel = on_cancel
        self._node = node_id()
        self.received_total = 0

    async def start(self) -> None:
        if self._bus is not None:
            unreadable = "cluster: an unreadable cancel message was ignored"
            await self._bus.subscribe(CHANNEL, reading(_decode, self._receive, log, unreadable))

    def announce(self, tenant_id: str, session_id: str, epoch: int, reason: str) -> None:
        if self._bus is not None:
            self._bus.publish(CHANNEL, _encode(CancelMessage(tenant_id, session_id, epoch, reason, self._node)))

    def _receive(self, message: CancelMessage) -> None:
        if message.node != self._node:
            self.received_total += 1
            self._on_cancel(message)
