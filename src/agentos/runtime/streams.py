"""Turn events to followers: on this node (an in-process fanout) and on others (the bus).

Publishing (`publish`, from the turn's own task): every event of a turn, tokens included, is
offered to this node's followers of the turn and, when `coordination.redis_url` is set and a
node follows the turn, queued once on the bus channel `turn:{tenant}:{session}:{turn}` (the bus
batches what queued into one pipeline). A follower on another node says so on the channel
`turn-follow` (again while it waits, and after an outage); the node running the turn publishes
from then until the turn ends. So a turn nobody follows from elsewhere costs a set lookup per
event, not a Redis command (about 25 us of CPU each in redis-py); nothing waits for Redis or
the database.

Following (`follow`): subscribe first (the fanout when the turn runs here, else the bus
channel), then read the stored events after the client's seq, then the live ones, skipping
any seq already sent. Stored events (`turn.started`, an agent turn's events, the terminal
event) are the truth; tokens are live only. When the live path may have lost something (a
follower over its queue bound, a bus that reconnected, a seq gap) the follower re-reads the
store from its last seq. While nothing comes it polls the store with a backoff, capped at
`FAST_POLL_S` when no live path can bring the turn's events (no bus, or Redis down) and
`SLOW_POLL_S` otherwise. A turn that sends nothing for `stall_s` ends the
stream with an `error` event (`turn_stalled`): it may wait on a human, or its node may be gone; the
client may resume.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from agentos.errors import NotFound
from agentos.ids import TURN_ID
from agentos.runtime.turn import TERMINAL_EVENTS, Turn, TurnSink
from agentos.store.base import Store

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus

MAX_QUEUED = 1024  # per follower; over it the follower re-reads the store (and loses tokens)
FIRST_POLL_S = 0.25
FAST_POLL_S = 1.0
SLOW_POLL_S = 8.0
STALL_S = 300.0
PAGE = 500
# A turn id the store does not know yet may be one just started on another node whose
# `turn.started` is still in that node's batched events lane: look again for about 1.5 s.
_LOOKUPS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 0.0)
# A store no other node writes has nothing to wait for: its reads see every write this node
# queued before them (each lane answers a read after what is queued ahead of it), and a turn of
# this node is live, or has queued its events, from its start on. One look answers.
_ONE_LOOK_S = (0.0,)

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(tuple[int, str, dict[str, Any]]).decode


@dataclass(frozen=True, slots=True)
class TurnEvent:
    seq: int  # 0: outside the stream (an `error` of the follower itself)
    name: str
    data: dict[str, Any]


FOLLOW_CHANNEL = "turn-follow"


def channel(tenant_id: str, session_id: str, turn_id: str) -> str:
    """The turn's bus channel; naming the tenant and session keeps followers to their own."""
    return f"turn:{tenant_id}:{session_id}:{turn_id}"


class _Follower:
    """A bounded queue of live events; `behind` once it overflowed or the bus lost messages."""

    __slots__ = ("_events", "_ready", "behind")

    def __init__(self) -> None:
        self._events: deque[TurnEvent] = deque()
        self._ready = asyncio.Event()
        self.behind = False

    def offer(self, event: TurnEvent) -> None:
        if self.behind:
            return
        if len(self._events) >= MAX_QUEUED:
            self.lose()
            return
        self._events.append(event)
        self._ready.set()

    def offer_raw(self, data: bytes) -> None:
        """A bus message; a malformed one only makes the follower re-read the store."""
        try:
            self.offer(TurnEvent(*_decode(data)))
        except (msgspec.DecodeError, TypeError):
            self.lose()

    def lose(self) -> None:
        self._events.clear()
        self.behind = True
        self._ready.set()

    async def get(self, timeout_s: float) -> TurnEvent | None:
        """The next live event; None after `timeout_s` without one, or when behind (then the
        caller re-reads the store)."""
        if not self._events and not self.behind:
            self._ready.clear()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._ready.wait()
            except TimeoutError:
                return None
        if self._events:
            return self._events.popleft()
        self.behind = False
        return None


class PublishingSink:
    """A turn's sink that publishes each event to its followers, then sends it on. The event
    is numbered `turn.seq`: each `send(turn.next_event_id(), ...)` made that id just before."""

    __slots__ = ("_sink", "_streams", "_turn")

    def __init__(self, sink: TurnSink, streams: TurnStreams, turn: Turn) -> None:
        self._sink = sink
        self._streams = streams
        self._turn = turn

    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        self._streams.publish(self._turn, name, data)
        await self._sink.send(event_id, name, data)


class TurnStreams:
    """The live followers of each turn on this node, and the turn events' way onto the bus."""

    def __init__(
        self,
        store: Store,
        bus: Bus | None = None,
        *,
        live: Callable[[str], bool],
        shared_store: bool = True,
        stall_s: float = STALL_S,
    ) -> None:
        """`live(turn_id)`: the turn runs on this node. `shared_store`: other nodes may write the
        store (PostgreSQL), so a turn unknown to it may be one just started elsewhere."""
        self._store = store
        self._bus = bus
        self._live = live
        self._lookups_s = _LOOKUPS_S if shared_store else _ONE_LOOK_S
        self._stall_s = stall_s
        self._followers: dict[str, set[_Follower]] = {}
        self._followed: set[str] = set()  # turns running here that another node follows
        if bus is not None:
            bus.on_reconnect(self._lose_all)

    async def start(self) -> None:
        """Hear the other nodes' followers (with a bus)."""
        if self._bus is not None:
            await self._bus.subscribe(FOLLOW_CHANNEL, self._on_follow)

    def publish(self, turn: Turn, name: str, data: dict[str, Any]) -> None:
        """The turn's event numbered `turn.seq` (its latest `next_event_id`), to every follower."""
        followers = self._followers.get(turn.turn_id)
        if followers:
            event = TurnEvent(turn.seq, name, data)
            for follower in followers:
                follower.offer(event)
        if turn.turn_id in self._followed and self._bus is not None:
            self._bus.publish(channel(turn.tenant_id, turn.session_id, turn.turn_id), _encode((turn.seq, name, data)))
            if name in TERMINAL_EVENTS:
                self._followed.discard(turn.turn_id)

    async def check_exists(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        """Raises: NotFound (`turn_not_found`): no event of the turn is stored, even after a
        short wait where the store is shared (a turn just started on another node); at once for
        an id no node makes (a scanner's guess holds no request open, costs no query)."""
        lookups_s = self._lookups_s if TURN_ID.fullmatch(turn_id) else ()
        for delay_s in lookups_s:
            if await self._store.list_turn_events(tenant_id, session_id, turn_id, after_seq=0, limit=1):
                return
            if delay_s:
                await asyncio.sleep(delay_s)  # the other node's events lane commits in batches
        raise NotFound(f"turn {turn_id!r} not found in session {session_id!r}", code="turn_not_found")

    async def follow(
        self, tenant_id: str, session_id: str, turn_id: str, after_seq: int, *, local: bool
    ) -> AsyncGenerator[TurnEvent, None]:
        """The turn's events after `after_seq`, stored then live, until its terminal event
        (or an `error` event when it stalls). `local`: the turn runs on
        this node, so its live events come from the fanout, not the bus."""
        following = await self.open(tenant_id, session_id, turn_id, local=local)
        try:
            async for event in following.events(after_seq):
                yield event
        finally:
            following.close()

    async def open(self, tenant_id: str, session_id: str, turn_id: str, *, local: bool) -> Following:
        """Start following the turn now (subscribed to its channel when it runs on another node,
        so nothing it publishes from here on is missed); read with `events`, then `close`."""
        follower = _Follower()
        self._followers.setdefault(turn_id, set()).add(follower)
        unsubscribe: Callable[[], None] | None = None
        if self._bus is not None and not local:  # subscribed before the store is read
            unsubscribe = await self._bus.subscribe(channel(tenant_id, session_id, turn_id), follower.offer_raw)
            self._bus.publish(FOLLOW_CHANNEL, turn_id.encode())
        return Following(self, follower, (tenant_id, session_id, turn_id), local, unsubscribe)

    def followed_elsewhere(self, turn_id: str) -> None:
        """A turn of this node that another node follows from its start (a forwarded one): its
        events go on the bus from the first, before that node's follow message could arrive."""
        self._followed.add(turn_id)

    def _leave(self, turn_id: str, follower: _Follower) -> None:
        followers = self._followers.get(turn_id)
        if followers is not None:
            followers.discard(follower)
            if not followers:
                self._followers.pop(turn_id, None)

    async def _events(
        self, follower: _Follower, key: tuple[str, str, str], last: int, local: bool, stall_s: float | None = None
    ) -> AsyncGenerator[TurnEvent, None]:
        stall_s = self._stall_s if stall_s is None else stall_s
        wait_s, heard = FIRST_POLL_S, time.monotonic()
        # The first read starts at 0: a client that already has the terminal event gets none.
        reread, first = True, True
        while True:
            if reread:
                for stored in await self._stored(key, 0 if first else last):
                    if stored.seq > last:
                        last, heard = stored.seq, time.monotonic()
                        yield stored
                    if stored.name in TERMINAL_EVENTS:
                        return
                first = False
            event = await follower.get(wait_s)
            if event is None:  # nothing for a while, or the live path lost something
                reread, wait_s = True, min(wait_s * 2, self._poll_cap(local))
                if self._bus is not None and not local:  # the running node may have missed it
                    self._bus.publish(FOLLOW_CHANNEL, key[2].encode())
                if time.monotonic() - heard > stall_s:
                    yield TurnEvent(0, "error", {"code": "turn_stalled", "message": _STALLED})
                    return
                continue
            reread, wait_s, heard = event.seq > last + 1, FIRST_POLL_S, time.monotonic()
            if reread:  # a gap: a stored event may lie in it; read it before this one
                for stored in await self._stored(key, last, below=event.seq):
                    last = stored.seq
                    yield stored
                reread = False
            if event.seq > last:
                last = event.seq
                yield event
            if event.name in TERMINAL_EVENTS:  # sent now, or the client had it already
                return

    def _poll_cap(self, local: bool) -> float:
        live = local or (self._bus is not None and self._bus.connected)
        return SLOW_POLL_S if live else FAST_POLL_S

    async def _stored(self, key: tuple[str, str, str], after: int, below: int | None = None) -> list[TurnEvent]:
        found: list[TurnEvent] = []
        for _ in range(100):  # pages; a turn stores a handful of events, an agent turn more
            page = await self._store.list_turn_events(*key, after_seq=after, limit=PAGE)
            found += (TurnEvent(r.seq, r.type, r.data) for r in page if below is None or r.seq < below)
            if len(page) < PAGE:
                break
            after = page[-1].seq
        return found

    def _on_follow(self, data: bytes) -> None:
        turn_id = data.decode(errors="replace")
        if self._live(turn_id):
            self._followed.add(turn_id)

    def _lose_all(self) -> None:
        """The bus reconnected: messages may have been lost meanwhile; every follower re-reads."""
        for followers in self._followers.values():
            for follower in followers:
                follower.lose()


@dataclass(slots=True, eq=False)
class Following:
    """One follower of one turn (`TurnStreams.open`): a handle on what `open` set up."""

    streams: TurnStreams
    follower: _Follower
    key: tuple[str, str, str]  # tenant, session, turn
    local: bool  # the turn runs on this node: no bus subscription
    unsubscribe: Callable[[], None] | None

    def events(self, after_seq: int = 0, stall_s: float | None = None) -> AsyncGenerator[TurnEvent, None]:
        """Stored then live events after `after_seq`; an `error` event (seq 0) after `stall_s`
        without one (default: the streams' `stall_s`), after which `events` may be read again."""
        return self.streams._events(self.follower, self.key, after_seq, self.local, stall_s)

    def close(self) -> None:
        self.streams._leave(self.key[2], self.follower)
        if self.unsubscribe is not None:
            self.unsubscribe()
            self.unsubscribe = None  # closing twice unsubscribes once


_STALLED = "no event of this turn for a while (it may wait on a human, or its node is gone); resume with Last-Event-ID"
