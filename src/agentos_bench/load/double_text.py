"""A double text per turn: each worker's session gets two messages, the second while the first runs.

`agentos bench sweep --double-text enqueue`: a worker sends its session a turn, and as soon as
that turn has started (its `turn.started` event) a second one with `on_busy: enqueue`, which
waits in the session's queue and runs when the first ends (docs/conversations.md). The pair is
two samples: the rows count both turns, so turns/s against the direct mock's in the same run
(one completion per worker at a time, as the session runs one turn at a time) is what the
queue costs. The second turn's TTFT includes its wait in the queue.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import aiohttp
import msgspec

from agentos.providers.sse_parser import SSEEvent
from agentos_bench.load.targets import EventVerdict, ServerTarget, TurnSample, server_verdict, timed_stream

DoubleText = Literal["none", "enqueue"]
DOUBLE_TEXTS: tuple[DoubleText, ...] = ("none", "enqueue")


class EnqueueTarget:
    """A `ServerTarget`'s sessions, each turn a pair: a turn, then one enqueued behind it."""

    def __init__(self, base_url: str, *, api_key: str | None = None, name: str = "server") -> None:
        self._server = ServerTarget(base_url, api_key=api_key, name=name)
        self.name = name
        self._url = f"{self._server.base_url}/v1/sessions/{{}}/turns"
        self._first = msgspec.json.encode({"input": "hello"})
        self._second = msgspec.json.encode({"input": "and then", "on_busy": "enqueue"})
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        return await self._server.open_worker(http)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        await self._server.close_worker(http, worker)

    async def turn(
        self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float
    ) -> tuple[TurnSample, TurnSample]:
        url = self._url.format(worker)
        started = asyncio.Event()

        def verdict(event: SSEEvent, seen_first: bool = False) -> EventVerdict:
            if event.event == "turn.started":
                started.set()
            return server_verdict(event, seen_first)

        first = asyncio.create_task(timed_stream(http, url, self._first, timeout_s, verdict, self._auth))
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait((first, waiting), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        second = await timed_stream(http, url, self._second, timeout_s, server_verdict, self._auth)
        return await first, second
