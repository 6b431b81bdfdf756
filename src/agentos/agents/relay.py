"""Run events between nodes over the bus: one channel per run, `run:{run_id}`.

A node whose client follows a run of another node subscribes to the run's channel, says so on
`run-follow`, and feeds what arrives into the run's local subscription
(`agentos.agents.fanout.Fanout.follow`). The node running the run publishes each of its events
(tokens included) once, batched by the bus, from then until the run ends: a run nobody follows
from elsewhere costs no Redis command (about 25 us of CPU each in redis-py). The journal stays
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
from agentos.kernel import RUN_TERMINAL_EVENTS

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(tuple[int, str, dict[str, Any]]).decode


FOLLOW_CHANNEL = "run-follow"
MAX_FOLLOWED = 10_000  # runs followed from elsewhere that this node remembers; the oldest go first


def channel(run_id: str) -> str:
    return f"run:{run_id}"


class RunRelay:
    """The `Bridge` of the run fanout over the bus."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._fed: dict[Subscription, str] = {}  # followers here of runs elsewhere, by run id
        self._followed: dict[str, None] = {}  # runs that other nodes follow (an ordered set)
        bus.on_reconnect(self._lose_all)

    async def start(self) -> None:
        await self._bus.subscribe(FOLLOW_CHANNEL, self._on_follow)

    def followed(self, run_id: str) -> bool:
        """Another node said it follows the run (and it has not ended since)."""
        return run_id in self._followed

    def publish(self, run_id: str, event: RunEvent) -> None:
        if run_id not in self._followed:
            return
        self._bus.publish(channel(run_id), _encode((event.seq, event.type, event.data)))
        if event.type in RUN_TERMINAL_EVENTS:
            self._followed.pop(run_id, None)

    async def attach(self, run_id: str, subscription: Subscription) -> Callable[[], None]:
        def deliver(data: bytes) -> None:
            try:
                subscription.offer(RunEvent(*_decode(data)))
            except (msgspec.DecodeError, TypeError):
                subscription.fall_behind()  # a message we cannot read: the journal has it

        self._fed[subscription] = run_id
        unsubscribe = await self._bus.subscribe(channel(run_id), deliver)
        self._bus.publish(FOLLOW_CHANNEL, run_id.encode())

        def detach() -> None:
            self._fed.pop(subscription, None)
            unsubscribe()

        return detach

    def _on_follow(self, data: bytes) -> None:
        # Any node's run: this node cannot tell its own runs here, so the set is bounded instead.
        self._followed[data.decode(errors="replace")] = None
        if len(self._followed) > MAX_FOLLOWED:
            self._followed.pop(next(iter(self._followed)))

    def _lose_all(self) -> None:
        """Messages may have been lost: the followers re-read the journal, and say again that
        they follow (the running node may have missed it)."""
        for subscription, run_id in self._fed.items():
            subscription.fall_behind()
            self._bus.publish(FOLLOW_CHANNEL, run_id.encode())
