"""Run events between nodes over the bus: one channel per run, `run:{run_id}`.

The node running a run publishes each of its events (tokens included) once, batched by the
bus; a node whose client follows that run subscribes to the channel and feeds what arrives
into the run's local subscription (`agentos.agents.fanout.Fanout.follow`). The journal stays
the truth: a follower de-duplicates by seq, and after a bus reconnect (messages may have been
lost) every fed subscription falls behind, so its reader re-reads the journal from its last seq.

Following a run of another node needs that node's journal rows, so it works once the journal
is shared (PostgreSQL); with a journal per node, another node does not know the run (404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from agentos.agents.fanout import RunEvent, Subscription
from agentos.coordination.bus import Bus

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(tuple[int, str, dict[str, Any]]).decode


def channel(run_id: str) -> str:
    return f"run:{run_id}"


class RunRelay:
    """The `Bridge` of the run fanout over the bus."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._fed: set[Subscription] = set()
        bus.on_reconnect(self._lose_all)

    def publish(self, run_id: str, event: RunEvent) -> None:
        self._bus.publish(channel(run_id), _encode((event.seq, event.type, event.data)))

    async def attach(self, run_id: str, subscription: Subscription) -> Callable[[], None]:
        def deliver(data: bytes) -> None:
            try:
                subscription.offer(RunEvent(*_decode(data)))
            except (msgspec.DecodeError, TypeError):
                subscription.fall_behind()  # a message we cannot read: the journal has it

        self._fed.add(subscription)
        unsubscribe = await self._bus.subscribe(channel(run_id), deliver)

        def detach() -> None:
            self._fed.discard(subscription)
            unsubscribe()

        return detach

    def _lose_all(self) -> None:
        for subscription in self._fed:
            subscription.fall_behind()
