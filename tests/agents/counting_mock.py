"""The bench mock in the `tools` scenario, plus a log of completed answers per (run, step).

The mock's own counters are totals; the durability test needs to know *which* model call
completed, so a middleware tags each request with (the run's user text, k = tool messages
since it) in a context variable, and the mock's completion counter is wrapped to record it.
The wrap relies on `_MockApp._count_outcome` being called in the request's task; if the bench
kit grows a per-request hook, use that instead.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agentos.bench.mock.scenario import last_user_text, tool_messages_since_user
from agentos.bench.mock.server import MOCK_KEY, MockSettings, create_mock_app

Key = tuple[str, int]  # (user input of the run, k)
_current: contextvars.ContextVar[Key | None] = contextvars.ContextVar("mock_request_key", default=None)


@dataclass
class CountingMock:
    url: str
    runner: web.AppRunner
    epoch: int = 0  # bumped by the test at every kill of the server
    completions: Counter[tuple[Key, int]] = field(default_factory=Counter)  # (key, epoch) -> count

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
            _current.set((last_user_text(messages), tool_messages_since_user(messages)))
        response: web.StreamResponse = await handler(request)
        return response

    original = mock._count_outcome

    def count_outcome(outcome: str) -> None:
        key = _current.get()
        if key is not None and counting is not None:
            counting.completions[(key, counting.epoch)] += 1
        original(outcome)

    mock._count_outcome = count_outcome  # type: ignore[method-assign]
    app.middlewares.append(tag)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    counting = CountingMock(url=f"http://127.0.0.1:{port}/v1", runner=runner)
    return counting
