"""The bench mock in the `tools` scenario, plus a log of completed answers per (run, step).

The mock's own counters are totals; the durability test needs to know *which* model call
completed, so a middleware tags each request with (the run's user text, k = tool messages
since it) in a context variable, and the mock's completion counter is wrapped to record it.
The wrap relies on `_MockApp._count_outcome` being called in the request's task; if the bench
kit grows a per-request hook, use that instead.

`hold` picks requests that wait at the door until `released` is set (each is put on `held` as
it arrives): a test knows such a call is in flight, and that it cannot finish before the test
lets it, e.g. across a kill -9 of the node that made it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agentos.mock.scenario import last_user_text, tool_messages_since_user
from agentos.mock.server import MOCK_KEY, MockSettings, create_mock_app

Key = tuple[str, int]  # (user input of the run, k)
_current: contextvars.ContextVar[Key | None] = contextvars.ContextVar("mock_request_key", default=None)


@dataclass
class CountingMock:
    url: str
    runner: web.AppRunner
    epoch: int = 0  # bumped by the test at every kill of the server
    completions: Counter[tuple[Key, int]] = field(default_factory=Counter)  # (key, epoch) -> count
    hold: Callable[[Key], bool] = lambda _key: False  # the requests that wait for `released`
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held: asyncio.Queue[Key] = field(default_factory=asyncio.Queue)  # each held request, as it arrives
    dropped: asyncio.Queue[Key] = field(default_factory=asyncio.Queue)  # each one whose caller went away

    async def wait_held(self, count: int, timeout_s: float) -> list[Key]:
        """The next `count` requests held at the door, in the order they came (bounded)."""
        async with asyncio.timeout(timeout_s):
            return [await self.held.get() for _ in range(count)]

    async def wait_dropped(self, count: int, timeout_s: float) -> list[Key]:
        """The next `count` held requests whose caller went away (a node killed), bounded."""
        async with asyncio.timeout(timeout_s):
            return [await self.dropped.get() for _ in range(count)]

    def completed(self) -> int:
        return sum(self.completions.values())

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_counting_mock(settings: MockSettings) -> CountingMock:
    app = create_mock_app(settings)
    mock = app[MOCK_KEY]
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    counting: CountingMock | None = None

    @web.middleware
    async def tag(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.endswith("/chat/completions"):
            messages = (await request.json()).get("messages") or []
            key = (last_user_text(messages), tool_messages_since_user(messages))
            _current.set(key)
            if counting is not None and counting.hold(key) and not counting.released.is_set():
                counting.held.put_nowait(key)
                try:
                    await counting.released.wait()
                except asyncio.CancelledError:  # the caller went away (handler_cancellation)
                    counting.dropped.put_nowait(key)
                    raise
        response: web.StreamResponse = await handler(request)
        return response

    original = mock._count_outcome

    def count_outcome(outcome: str) -> None:
        key = _current.get()
        if key is not None and counting is not None:
            counting.completions[(key, counting.epoch)] += 1
        original(outcome)

    mock._count_outcome = count_outcome  # type: ignore[method-assign]  # counts what the real mock decides
    app.middlewares.append(tag)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    counting = CountingMock(url=f"http://127.0.0.1:{port}/v1", runner=runner)
    return counting
