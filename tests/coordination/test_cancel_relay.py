"""The cancel message between nodes: a node cancels its turn of a session only for a newer
epoch than the turn holds. Pub/sub gives no ordering across publishers, so a late message about
an older epoch must never cancel a newer turn.

A real server (PostgreSQL store, Redis bus) and a test publisher on the same Redis prefix
standing for another node; the bus keeps one publisher's messages in order, so the second
message is handled after the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.config import CoordinationConfig, StoreConfig
from agentos.coordination.bus import Bus
from agentos.mock.server import MockServer
from agentos.runtime.cluster import CHANNEL, CancelMessage
from agentos.store.records import DEFAULT_TENANT
from agentos.testing import RunningServer
from tests.api.helpers import new_session, turn_events
from tests.conftest import REDIS_URL

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(30)]


@pytest.fixture
async def other_node(prefix: str) -> AsyncIterator[Bus]:
    bus = Bus(CoordinationConfig(redis_url=REDIS_URL, key_prefix=prefix))
    await bus.start()
    await bus.wait_connected()
    yield bus
    await bus.close()


def cancel(session_id: str, epoch: int, reason: str) -> bytes:
    return msgspec.msgpack.encode(CancelMessage(DEFAULT_TENANT, session_id, epoch, reason, "another-node"))


async def test_a_message_about_an_older_epoch_does_not_cancel_the_turn(
    pg: StoreConfig,  # first: the server stops before its schema is dropped
    server_factory: Callable[..., Awaitable[RunningServer]],
    mock_factory: Any,
    prefix: str,
    other_node: Bus,
    http: aiohttp.ClientSession,
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=3000, tps=200, tokens=3)
    store = {
        "store.backend": "postgres",
        "store.postgres_url": pg.postgres_url,
        "store.postgres_schema": pg.postgres_schema,
    }
    bus = {"coordination.redis_url": REDIS_URL, "coordination.key_prefix": prefix}
    server = await server_factory(mock.url, **store, **bus)
    assert server.services.bus is not None
    await server.services.bus.wait_connected()
    sid = await new_session(http, server.url)
    turn = asyncio.create_task(turn_events(http, server.url, sid, "hello"))
    await mock.stats.wait_for(lambda s: s.requests == 1, what="the turn upstream (its epoch is 1)")
    other_node.publish(CHANNEL, cancel(sid, 1, "cancelled"))  # late news of epoch 1: the turn's own
    other_node.publish(CHANNEL, cancel(sid, 2, "superseded"))  # a newer turn elsewhere
    events = await asyncio.wait_for(turn, 1.5)
    assert (events[-1].name, events[-1].data["reason"]) == ("turn.cancelled", "superseded")
    await mock.stats.wait_for(lambda s: s.aborted == 1, what="the upstream request aborted")
