"""Fixtures against the real Redis on 127.0.0.1:6379 (started before each session and CI run).

Every test gets its own key prefix (`agentos:test:<random>:`) and deletes its keys after, so
tests share the one Redis without seeing each other. `RedisProxy` stands between a node and
that Redis when a test needs a Redis that goes away: it forwards, or stops answering
(connections held open, nothing relayed), or refuses connections; the shared Redis itself is
never stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentos.config import CoordinationConfig
from agentos.coordination.link import Link, open_link
from tests.conftest import REDIS_URL  # the Redis and `prefix` are every test's (tests/conftest.py)

# These tests need the `redis` extra (CI installs `.[test]`, which has it); without it they are
# not collected, and the rest of the suite still runs.
if importlib.util.find_spec("redis") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture
async def link_factory(prefix: str) -> AsyncIterator[Callable[..., Awaitable[Link]]]:
    """Links ("nodes") to the test's Redis namespace; each has its own connection pool."""
    links: list[Link] = []

    async def make(url: str = REDIS_URL, **config: Any) -> Link:
        link = await open_link(CoordinationConfig(redis_url=url, key_prefix=prefix, **config))
        links.append(link)
        return link

    yield make
    for link in links:
        await link.close()


class RedisProxy:
    """A TCP relay to the real Redis that a test can make stop answering."""

    def __init__(self) -> None:
        self.port = 0
        self.mode = "forward"  # or "silent": accept and read, relay nothing
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and drop the open ones (Redis gone)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 6379)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        relays = [self._relay(reader, up_writer), self._relay(up_reader, writer)]
        with contextlib.suppress(Exception):
            await asyncio.gather(*relays)
        for w in (writer, up_writer):
            w.close()
            self._writers.discard(w)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.mode == "forward":
                writer.write(data)
                await writer.drain()
        writer.close()


@pytest.fixture
async def redis_proxy() -> AsyncIterator[RedisProxy]:
    proxy = RedisProxy()
    await proxy.start()
    yield proxy
    await proxy.stop()
