"""The request and reply of `TurnForwarding` over the real Redis bus: two "nodes" in one
process, each with its own bus. A request reaches every other node; the one whose `serve`
answers is the one replying; none answering is a None after `ASK_S`, never a hang."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentos.config import CoordinationConfig
from agentos.coordination.bus import Bus
from agentos.runtime import forwarding
from agentos.runtime.forwarding import Forwarded, Reply, TurnForwarding
from tests.conftest import REDIS_URL

pytestmark = [pytest.mark.timeout(30)]


@pytest.fixture
async def buses(prefix: str) -> AsyncIterator[tuple[Bus, Bus]]:
    pair = (Bus(CoordinationConfig(redis_url=REDIS_URL, key_prefix=prefix)) for _ in range(2))
    a, b = list(pair)
    for bus in (a, b):
        await bus.start()
        await bus.wait_connected()
    yield a, b
    await a.close()
    await b.close()


async def test_the_node_that_runs_the_session_replies(buses: tuple[Bus, Bus]) -> None:
    a_bus, b_bus = buses
    heard: list[Forwarded] = []
    a: TurnForwarding

    async def serve_a(request: Forwarded) -> Reply | None:
        heard.append(request)
        if request.session_id != "ses_mine":
            return None  # not this node's session: it stays silent
        if request.input == "full":
            return a.refused(request, 429, "turn_queue_full", "the queue is full", 2, None)
        return a.admitted(request)

    async def serve_b(request: Forwarded) -> Reply | None:
        raise AssertionError("a node never serves its own requests")

    a = TurnForwarding(a_bus, serve_a, node="node-a")
    b = TurnForwarding(b_bus, serve_b, node="node-b")
    await a.start()
    await b.start()
    assert b.available
    ask = b.request
    admitted = await b.ask(ask("turn", "t1", "ses_mine", "turn_1", input="two", on_busy="enqueue"))
    assert admitted is not None and (admitted.status, admitted.node) == (0, "node-a")
    refused = await b.ask(ask("turn", "t1", "ses_mine", "turn_2", input="full", on_busy="enqueue"))
    assert refused is not None and (refused.status, refused.code, refused.retry_after_s) == (429, "turn_queue_full", 2)
    assert [r.turn_id for r in heard] == ["turn_1", "turn_2"] and heard[0].on_busy == "enqueue"
    assert (b.statistics().asked_total, b.statistics().unanswered_total, a.statistics().answered_total) == (2, 0, 2)


async def test_no_reply_is_none_after_the_wait(buses: tuple[Bus, Bus], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "ASK_S", 0.3)
    a_bus, b_bus = buses
    served = asyncio.Event()

    async def silent(request: Forwarded) -> Reply | None:
        served.set()
        return None

    await TurnForwarding(a_bus, silent, node="node-a").start()
    b = TurnForwarding(b_bus, silent, node="node-b")
    await b.start()
    assert await b.ask(b.request("turn", "t1", "ses_elsewhere", "turn_1", input="x", on_busy="steer")) is None
    await asyncio.wait_for(served.wait(), 5)  # it was heard; nobody answered for that session
