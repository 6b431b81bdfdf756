"""Messages between nodes over Redis pub/sub: cancels, stream events, wake-ups.

Publishing is batched and ordered: `publish` queues the message and one sender task writes
what has queued as one pipeline (one round trip, however many tokens arrived meanwhile), in
the order they were queued. Over `MAX_QUEUED` messages new ones are dropped and counted: a
follower on another node then sees a gap and re-reads the durable log, which is the truth;
the bus only makes it prompt.

Receiving uses one dedicated pub/sub connection per node. Callbacks are sync and must be
quick (put into a queue, set an event). When the connection drops, or stops answering its
pings, the bus reconnects, subscribes again to every channel, then calls the `on_reconnect`
callbacks: whatever was published meanwhile is lost, and subscribers re-read from the store.

Channels are named under `coordination.key_prefix`, so tests and deployments that share a
Redis do not hear each other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from agentos.config import CoordinationConfig

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.client import PubSub

log = logging.getLogger("agentos.coordination")

Callback = Callable[[bytes], None]
T = TypeVar("T")
MAX_QUEUED = 100_000
PING_EVERY_S = 1.0
RECONNECT_S = 0.5


def reading(
    decode: Callable[[bytes], T], handle: Callable[[T], None], logger: logging.Logger, unreadable: str
) -> Callback:
    """A callback that hands `handle` each message `decode` reads. One it cannot read (another
    version's, not ours) is a warning (`unreadable`, on the subscriber's `logger`) and is
    ignored: it must not end the subscription."""

    def receive(data: bytes) -> None:
        try:
            message = decode(data)
        except msgspec.DecodeError:
            logger.warning("%s", unreadable)
            return
        handle(message)

    return receive


class Bus:
    """Pub/sub between nodes. `start()` before use, `close()` after.

    Usage::

        bus = Bus(config)
        await bus.start()
        unsubscribe = await bus.subscribe("cancel", lambda data: ...)
        bus.publish("cancel", b"ses_1")
    """

    def __init__(self, config: CoordinationConfig) -> None:
        self._config = config
        self._prefix = config.key_prefix
        self._callbacks: dict[str, list[Callback]] = defaultdict(list)
        self._on_reconnect: list[Callable[[], None]] = []
        self._queue: deque[tuple[str, bytes]] = deque()
        self._wake = asyncio.Event()
        self._pubsub: PubSub | None = None
        self._connected = asyncio.Event()
        self._disconnected = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._redis: Redis | None = None
        self._closed = False
        self._ever_connected = False
        self._sent = asyncio.Event()  # set while nothing is queued or in flight
        self._sent.set()
        self._background: set[asyncio.Task[None]] = set()
        self.dropped = 0  # messages not sent: the queue was full or Redis was down

    @property
    def connected(self) -> bool:
        """The subscriber connection is up (messages published now reach this node)."""
        return self._connected.is_set()

    async def start(self) -> None:
        from redis.asyncio import Redis

        timeout = self._config.timeout_s
        # No socket timeout: the pub/sub connection idles between messages; pings detect a dead one.
        self._redis = Redis.from_url(self._config.redis_url, socket_connect_timeout=timeout)
        self._tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._send())]

    async def wait_connected(self, timeout_s: float = 5.0) -> None:
        """Raises: TimeoutError: the subscriber connection is not up within `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            await self._connected.wait()

    async def wait_disconnected(self, timeout_s: float = 10.0) -> None:
        """Raises: TimeoutError: the subscriber connection is still up after `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            await self._disconnected.wait()

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call `callback()` after each reconnect: messages may have been missed meanwhile."""
        self._on_reconnect.append(callback)

    async def subscribe(self, channel: str, callback: Callback) -> Callable[[], None]:
        """Call `callback(data)` for each message on `channel`; returns the unsubscribe function.
        While Redis is down the subscription is kept and made again on reconnect."""
        callbacks = self._callbacks[channel]
        callbacks.append(callback)
        if len(callbacks) == 1 and self._pubsub is not None:
            await self._quietly(self._pubsub.subscribe(self._prefix + channel))

        def unsubscribe() -> None:
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                self._callbacks.pop(channel, None)
                if self._pubsub is not None:
                    self._spawn(self._quietly(self._pubsub.unsubscribe(self._prefix + channel)))

        return unsubscribe

    def publish(self, channel: str, data: bytes) -> None:
        """Queue `data` for `channel`; sent in order with whatever else is queued."""
        if len(self._queue) >= MAX_QUEUED:
            self.dropped += 1
            return
        self._queue.append((self._prefix + channel, data))
        self._sent.clear()
        self._wake.set()

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until every message queued so far has been sent (or dropped)."""
        async with asyncio.timeout(timeout_s):
            await self._sent.wait()

    async def close(self) -> None:
        self._closed = True
        tasks = [*self._tasks, *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._pubsub is not None:
            await self._quietly(self._pubsub.aclose())  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8.2 on
        if self._redis is not None:
            await self._redis.aclose()

    # --- sending ---

    async def _send(self) -> None:
        assert self._redis is not None
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), 1000))]
                pipe = self._redis.pipeline(transaction=False)
                for channel, data in batch:
                    pipe.publish(channel, data)
                try:
                    async with asyncio.timeout(self._config.timeout_s * 4):
                        await pipe.execute()
                except Exception as exc:  # Redis down: these are lost; followers re-read the store
                    self.dropped += len(batch)
                    log.debug("bus: %d messages not sent (%s)", len(batch), type(exc).__name__)
            self._sent.set()

    # --- receiving ---

    async def _receive(self) -> None:
        while not self._closed:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._connected.is_set():
                    log.warning("bus: Redis pub/sub connection lost (%s); reconnecting", type(exc).__name__)
                self._connected.clear()
                self._disconnected.set()
            if self._pubsub is not None:
                await self._quietly(self._pubsub.aclose())  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8.2 on
                self._pubsub = None
            await asyncio.sleep(RECONNECT_S)  # between attempts while Redis is down

    async def _listen(self) -> None:
        assert self._redis is not None
        pubsub = self._redis.pubsub()
        self._pubsub = pubsub
        async with asyncio.timeout(self._config.timeout_s * 4):
            await pubsub.ping()  # connects; a `subscribe` without channels would not
            if self._callbacks:
                await pubsub.subscribe(*(self._prefix + c for c in self._callbacks))
        reconnected, self._ever_connected = self._ever_connected, True
        self._disconnected.clear()
        self._connected.set()
        if reconnected:
            for callback in self._on_reconnect:
                callback()
        last_seen = last_ping = time.monotonic()
        while True:
            message = await pubsub.get_message(timeout=PING_EVERY_S)
            now = time.monotonic()
            if message is not None:
                last_seen = now
                self._dispatch(message)
            if now - last_ping >= PING_EVERY_S:
                await pubsub.ping()
                last_ping = now
            if now - last_seen > 3 * PING_EVERY_S:
                raise TimeoutError("no answer to pings")

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message["type"] != "message":
            return  # subscribe confirmations and pongs only prove the connection is alive
        channel = message["channel"].decode()[len(self._prefix) :]
        for callback in list(self._callbacks.get(channel, ())):
            try:
                callback(message["data"])
            except Exception:
                log.exception("bus: a subscriber of %s failed", channel)

    async def _quietly(self, awaitable: Any) -> None:
        try:
            async with asyncio.timeout(self._config.timeout_s * 4):
                await awaitable
        except Exception as exc:  # the receive loop notices a dead connection and resubscribes
            log.debug("bus: %s", type(exc).__name__)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
