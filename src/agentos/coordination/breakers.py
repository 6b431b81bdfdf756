"""The router's breakers shared by every node (`coordination.redis_url`).

A node that opens a target's breaker, closes it, or holds a target back for its Retry-After
says so on the bus; every other node applies it to its own breakers
(`agentos.providers.breaker.Breakers.apply_*`), so one node's discovery spares the others
their own run of failures. The state machine stays each node's: a message only moves a
breaker where the node would have moved it itself had it seen the failures.

Pub/sub, not a key: a message lost while a node is cut off from Redis costs that node at most
its own `routing.breaker_failures` calls to find out for itself, and nothing has to expire.
"""

from __future__ import annotations

import logging
from typing import Literal

import msgspec

from agentos.coordination.bus import Bus, reading
from agentos.providers.breaker import Breakers

log = logging.getLogger("agentos.coordination")

CHANNEL = "breakers"


class _Message(msgspec.Struct, frozen=True):
    node: str
    kind: Literal["opened", "closed", "held"]
    target: str
    for_s: float = 0.0


_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(_Message).decode


class BusBreakerShare:
    """A `BreakerShare` over the bus. Usage::

    share = BusBreakerShare(bus, node_id())
    router = open_router(settings, clock, share=share)
    await share.start(router.breakers)
    """

    def __init__(self, bus: Bus, node: str) -> None:
        self._bus = bus
        self._node = node
        self._breakers: Breakers | None = None
        self.received = 0  # messages applied from other nodes

    async def start(self, breakers: Breakers) -> None:
        self._breakers = breakers
        unreadable = "breakers: a message that is not one of ours on the bus; ignored"
        await self._bus.subscribe(CHANNEL, reading(_decode, self._on_message, log, unreadable))

    def opened(self, target: str, until_s: float) -> None:
        self._publish("opened", target, until_s)

    def closed(self, target: str) -> None:
        self._publish("closed", target, 0.0)

    def held(self, target: str, for_s: float) -> None:
        self._publish("held", target, for_s)

    def _publish(self, kind: Literal["opened", "closed", "held"], target: str, for_s: float) -> None:
        self._bus.publish(CHANNEL, _encode(_Message(self._node, kind, target, for_s)))

    def _on_message(self, message: _Message) -> None:
        if message.node == self._node or self._breakers is None:
            return
        self.received += 1
        if message.kind == "opened":
            self._breakers.apply_opened(message.target, message.for_s)
        elif message.kind == "closed":
            self._breakers.apply_closed(message.target)
        else:
            self._breakers.apply_held(message.target, message.for_s)
