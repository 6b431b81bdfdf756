"""Helpers shipped for tests (ours and yours): a server on a loopback port, an SSE reader."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from agentos.api.app import create_app
from agentos.api.connections import make_runner
from agentos.clock import Clock, MonotonicClock
from agentos.config import Settings
from agentos.kernel import Kernel
from agentos.providers.base import ChatRequest, Completion, StreamItem, TextDelta, Usage
from agentos.providers.sse_parser import SSEParser
from agentos.runtime.driver import Driver
from agentos.runtime.runtime import Runtime, kernel_limits
from agentos.services import Services, open_services


def standalone_driver(settings: Settings, *, max_active_runs: int | None = None, clock: Clock | None = None) -> Driver:
    """A kernel and its driver for a `RunService` a test (or a tool) builds on its own, as
    `open_services` builds the server's: from `settings.kernel`, `max_active_runs` overriding."""
    limits = kernel_limits(settings)
    if max_active_runs is not None:
        limits = dataclasses.replace(limits, max_active_runs=max_active_runs)
    return Driver(Kernel(limits), clock or MonotonicClock())


@dataclass
class RunningServer:
    url: str
    app: web.Application
    runner: web.AppRunner
    services: Services

    @property
    def runtime(self) -> Runtime:
        return self.services.runtime

    async def close(self) -> None:
        await self.services.drain(5.0)
        await self.runner.cleanup()
        await self.services.close(5.0)


async def start_server(
    settings: Settings, *, clock: Clock | None = None, wall_clock: Clock | None = None
) -> RunningServer:
    """The real application on 127.0.0.1 and a free port, in this event loop, built as
    `agentos serve` builds it.

    Args:
        settings: the server's settings.
        clock: the kernel's time (a `FakeClock` moves only when the test says so; deadlines
            then fire when the test calls `server.runtime.tick()`); the rate limiters' too.
            Default: monotonic time.
        wall_clock: the quotas' calendar (epoch seconds; a FakeClock crosses midnight on cue).
    """
    return await serve_services(await open_services(settings, clock=clock, wall_clock=wall_clock))


async def serve_services(
    services: Services, change: Callable[[web.Application], object] | None = None
) -> RunningServer:
    """`services`' application on 127.0.0.1 and a free port, served as `agentos serve` serves it
    (`agentos.api.connections.make_runner`: its deadlines, per-address bound, JSON parser
    errors and `Expect` handling), for services a test opened itself (a scripted provider, a
    fake key clock). `change` has the app before it starts (a test-only route)."""
    app = create_app(services)
    if change is not None:
        change(app)
    runner = make_runner(app, services.settings.server, services.metrics, shutdown_timeout=2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return RunningServer(f"http://127.0.0.1:{port}", app, runner, services)


@dataclass(frozen=True)
class Event:
    name: str
    id: str | None
    data: dict[str, Any]


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[Event]:
    """Parse an SSE response body into events as they arrive."""
    parser = SSEParser()
    async for chunk in response.content.iter_any():
        for event in parser.feed(chunk):
            yield Event(event.event, event.id, msgspec.json.decode(event.data))


async def eventually(
    predicate: Callable[[], bool | Awaitable[bool]], timeout_s: float = 5.0, what: str = "condition"
) -> None:
    """Poll `predicate()` until it holds, for state in ANOTHER process (a file a subprocess
    writes, a peer's port or HTTP answers), which offers no event this process could wait on.

    State in this process has events: wait on them instead (`Runtime.wait_idle`,
    `MockStats.wait_for`, an `asyncio.Event`). `predicate` may be a coroutine function (an
    HTTP poll). Bounded: fails after `timeout_s`.

    Raises:
        AssertionError: `predicate()` did not hold within `timeout_s`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await _holds(predicate):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


async def _holds(predicate: Callable[[], bool | Awaitable[bool]]) -> bool:
    result = predicate()
    return bool(await result) if inspect.isawaitable(result) else result


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self._now += seconds


class ScriptedProvider:
    """A provider that answers from a script: `deltas`, then a completion; or hangs until released.

    It records every request and whether each stream was closed early (aborted)."""

    def __init__(self, deltas: Sequence[str] = ("a ", "b "), *, hang: bool = False) -> None:
        self.deltas = list(deltas)
        self.hang = hang
        self.release = asyncio.Event()
        self.requests: list[ChatRequest] = []
        self.opened = asyncio.Event()
        self.aborted = 0
        self.completed = 0

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        self.requests.append(request)
        self.opened.set()
        finished = False
        try:
            if self.hang:
                await self.release.wait()
            for delta in self.deltas:
                yield TextDelta(delta)
            finished = True
            self.completed += 1
            yield Completion("".join(self.deltas), "stop", Usage(1, len(self.deltas)))
        finally:
            if not finished:
                self.aborted += 1

    async def aclose(self) -> None:
        return None
