"""Run events to live subscribers, with a bound per subscriber.

Every event but `token` is journaled before it is published, so the journal is the truth and a
subscriber's queue is only a fast path. That gives the policy for a slow subscriber (an SSE
client that does not read): when its queue holds `max_queued` events, the queue is emptied and
the subscription marked behind; its reader then re-reads the journal from its last event and
subscribes afresh. A slow reader loses token events (they are live-only), never a journaled
one, and never grows memory past the bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agentos.waiting import Mailbox

DEFAULT_MAX_QUEUED = 256


@dataclass(frozen=True, slots=True)
class RunEvent:
    seq: int  # a token carries the seq of the last journaled event before it
    type: str
    data: dict[str, Any]


class Bridge(Protocol):
    """Run events between nodes (`agentos.agents.relay.RunRelay`, over the bus)."""

    def publish(self, run_id: str, event: RunEvent) -> None:
        """Send this node's event of the run to the other nodes' followers."""
        ...

    async def attach(self, run_id: str, subscription: Subscription) -> Callable[[], None]:
        """Feed the run's events from other nodes into `subscription`; returns the detach."""
        ...


class Subscription:
    __slots__ = ("_events", "_max", "behind")

    def __init__(self, max_queued: int) -> None:
        self._events: Mailbox[RunEvent] = Mailbox()
        self._max = max_queued
        self.behind = False  # the queue overflowed: re-read the journal

    def offer(self, event: RunEvent) -> None:
        if self.behind:
            return
        if len(self._events) >= self._max:
            self.fall_behind()
        else:
            self._events.put(event)

    def fall_behind(self) -> None:
        """Events may have been lost (the bus reconnected): the reader re-reads the journal."""
        self._events.clear()
        self.behind = True
        self._events.close()

    async def get(self) -> RunEvent | None:
        """The next event, or None when the subscription fell behind."""
        return await self._events.get()


class Fanout:
    """The live subscribers of each run."""

    def __init__(self, max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        self._subscribers: dict[str, list[Subscription]] = {}
        self._max = max_queued
        self.idle = asyncio.Event()  # set while no run has a subscriber
        self.idle.set()
        self._bridge: Bridge | None = None
        self._detach: dict[Subscription, Callable[[], None]] = {}

    def bridge(self, bridge: Bridge) -> None:
        """From now on, publish every event to other nodes too, and follow theirs (`follow`)."""
        self._bridge = bridge

    async def follow(self, run_id: str, *, local: bool) -> Subscription | None:
        """A subscription to the run's live events: from this node when it runs here (`local`),
        else from the other nodes over the bridge (None without one: the journal is all there is).
        """
        if not local and self._bridge is None:
            return None
        subscription = self.subscribe(run_id)
        if not local and self._bridge is not None:
            self._detach[subscription] = await self._bridge.attach(run_id, subscription)
        return subscription

    def subscribe(self, run_id: str) -> Subscription:
        subscription = Subscription(self._max)
        self._subscribers.setdefault(run_id, []).append(subscription)
        self.idle.clear()
        return subscription

    def unsubscribe(self, run_id: str, subscription: Subscription) -> None:
        detach = self._detach.pop(subscription, None)
        if detach is not None:
            detach()
        subscribers = self._subscribers.get(run_id)
        if subscribers is None:
            return
        if subscription in subscribers:
            subscribers.remove(subscription)
        if not subscribers:
            del self._subscribers[run_id]
        if not self._subscribers:
            self.idle.set()

    def publish(self, run_id: str, event: RunEvent) -> None:
        for subscription in self._subscribers.get(run_id, ()):
            subscription.offer(event)
        if self._bridge is not None:
            self._bridge.publish(run_id, event)

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no run has a subscriber; False if some still had one after `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.idle.wait()
        except TimeoutError:
            return False
        return True

    def count(self) -> int:
        return sum(len(s) for s in self._subscribers.values())
