"""The bus between nodes on the real Redis: ordered batched publishing, isolation by prefix,
and what a subscriber sees across a Redis outage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agentos.config import CoordinationConfig
from agentos.coordination.bus import Bus
from tests.conftest import REDIS_URL
from tests.coordination.conftest import RedisProxy


@pytest.fixture
async def bus_factory(prefix: str) -> AsyncIterator[Callable[..., Awaitable[Bus]]]:
    buses: list[Bus] = []

    async def make(url: str = REDIS_URL, key_prefix: str = prefix) -> Bus:
        bus = Bus(CoordinationConfig(redis_url=url, key_prefix=key_prefix, timeout_s=0.5))
        await bus.start()
        buses.append(bus)
        await bus.wait_connected()
        return bus

    yield make
    for bus in buses:
        await bus.close()


class Inbox:
    def __init__(self, until: int) -> None:
        self.items: list[bytes] = []
        self.until = until
        self.done = asyncio.Event()

    def __call__(self, data: bytes) -> None:
        self.items.append(data)
        if len(self.items) >= self.until:
            self.done.set()

    async def wait(self) -> list[bytes]:
        await asyncio.wait_for(self.done.wait(), 5)
        return self.items


async def test_a_thousand_messages_arrive_in_order(bus_factory: Callable[..., Awaitable[Bus]]) -> None:
    sender, receiver = await bus_factory(), await bus_factory()
    inbox = Inbox(1000)
    await receiver.subscribe("ev:t1", inbox)
    for i in range(1000):
        sender.publish("ev:t1", str(i).encode())
    await sender.flush()
    assert await inbox.wait() == [str(i).encode() for i in range(1000)]
    assert sender.dropped == 0


async def test_unsubscribed_and_other_prefixes_hear_nothing(
    bus_factory: Callable[..., Awaitable[Bus]], prefix: str
) -> None:
    sender, receiver, stranger = await bus_factory(), await bus_factory(), await bus_factory(key_prefix=prefix + "x:")
    heard, strange = Inbox(1), Inbox(1)
    unsubscribe = await receiver.subscribe("cancel", heard)
    await stranger.subscribe("cancel", strange)
    sender.publish("cancel", b"a")
    await sender.flush()
    await heard.wait()
    unsubscribe()
    marker = Inbox(1)
    await receiver.subscribe("marker", marker)
    sender.publish("cancel", b"b")
    sender.publish("marker", b"m")  # published after: once it arrives, "b" would have too
    await sender.flush()
    await marker.wait()
    assert heard.items == [b"a"] and strange.items == []


async def test_after_an_outage_the_subscriber_reconnects_and_is_told(
    bus_factory: Callable[..., Awaitable[Bus]], redis_proxy: RedisProxy
) -> None:
    sender, receiver = await bus_factory(), await bus_factory(redis_proxy.url)
    reconnected = asyncio.Event()
    receiver.on_reconnect(reconnected.set)
    inbox = Inbox(1)
    await receiver.subscribe("ev", inbox)
    port = redis_proxy.port
    await redis_proxy.stop()
    await receiver.wait_disconnected()
    redis_proxy.port = port
    await redis_proxy.start()
    await asyncio.wait_for(reconnected.wait(), 10)
    sender.publish("ev", b"after")
    await sender.flush()
    assert await inbox.wait() == [b"after"]  # subscribed again on reconnect


async def test_a_silent_redis_is_noticed_by_its_pings(
    bus_factory: Callable[..., Awaitable[Bus]], redis_proxy: RedisProxy
) -> None:
    receiver = await bus_factory(redis_proxy.url)
    redis_proxy.mode = "silent"
    await receiver.wait_disconnected()


async def test_publishing_while_redis_is_down_drops_and_counts(
    bus_factory: Callable[..., Awaitable[Bus]], redis_proxy: RedisProxy
) -> None:
    sender = await bus_factory(redis_proxy.url)
    await redis_proxy.stop()
    sender.publish("ev", b"lost")
    await sender.flush()
    assert sender.dropped == 1
