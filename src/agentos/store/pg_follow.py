"""Following the other nodes' changes: LISTEN on a dedicated connection, re-read what changed.

Theory of operation. One task owns one connection that LISTENs on one channel. Each
notification names a changed thing (the tenant registry's: "t:<tenant_id>" or "k:<key_id>",
`agentos.tenancy.pg_tables`; the agents': a tenant id, `agentos.agents.changes`); the task
collects the names that arrived together and hands them to the sink (`Sink.refresh`, with a
`read` of those names), one refresh at a time, so a later read can never be overtaken by an
earlier one. A name the sink cannot read alone (`understood`: one a newer node sends) makes it
a full refresh. Every `full_reload_interval_s` it refreshes everything instead: the safety net
for a notification lost in a way the connection did not notice.

A lost connection (the server restarted, the network broke: asyncpg's termination callback, or
a read that failed or timed out) is replaced after `retry_s`, and the first thing done on the
new one, after LISTEN, is a full refresh: whatever changed while nobody listened is read then.
Meanwhile the sink keeps serving what it last knew (`statistics().listening` says so): requests
never wait on this task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from agentos.errors import ConfigError
from agentos.store import pg_pool
from agentos.store.pg_health import Outage
from agentos.waiting import wait_event

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("agentos.store")

FULL_RELOAD_INTERVAL_S = 30.0
RETRY_S = 1.0  # between a lost connection and the next try; doubled up to RETRY_MAX_S
RETRY_MAX_S = 10.0
READ_TIMEOUT_S = 10.0  # a read that takes longer is treated as a lost connection
R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)


class Sink(Protocol[R_contra]):
    """What the follower refreshes (the tenant registry, the agent registry's change marks)."""

    async def refresh(self, read: Callable[[], Awaitable[R_contra]], *, full: bool) -> None:
        """Await `read()` and take what it returns: everything (`full`), or what changed."""


@dataclass(frozen=True, slots=True)
class FollowerStatistics:
    listening: bool  # False: changes made elsewhere are not being heard now
    notifications: int
    full_reloads: int
    reconnects: int


class _Lost(Exception):
    """The LISTEN connection went away."""


class Follower(Generic[R]):
    """Usage::

    follower = Follower(lambda: pg_pool.connect(config), channel, registry, read_rows, understood=named)
    follower.start()
    ...
    await follower.close()
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        channel: str,
        sink: Sink[R],
        read: Callable[[asyncpg.Connection, Iterable[str] | None], Awaitable[R]],
        *,
        full_reload_interval_s: float = FULL_RELOAD_INTERVAL_S,
        understood: Callable[[str], bool] = lambda name: True,
        outage: Outage | None = None,
    ) -> None:
        """Args:
        read: reads the named things (None: all of them) on the follower's connection.
        understood: whether `read` can read a notification's name alone.
        outage: the node's tracker of its database (`pg_health.outage_of`): a connection that
            fails while the database is away is part of the outage's two log lines.
        """
        self._outage = outage or Outage(f"postgres ({channel})")
        self._connect = connect
        self._channel = channel
        self._sink = sink
        self._read = read
        self._understood = understood
        self._interval_s = full_reload_interval_s
        self._task: asyncio.Task[None] | None = None
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._lost = asyncio.Event()
        self._closed = asyncio.Event()
        self._listening = False
        self._notifications = self._full_reloads = self._reconnects = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"follower-{self._channel}")

    async def close(self) -> None:
        self._closed.set()  # as well as the cancel: asyncpg may turn the cancel of a connect or read into
        self._wake.set()  # another error, and the loop must still end
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def statistics(self) -> FollowerStatistics:
        return FollowerStatistics(self._listening, self._notifications, self._full_reloads, self._reconnects)

    async def _run(self) -> None:
        """Follow until cancelled; each failure waits a little longer (bounded) before the next try."""
        retry_s = RETRY_S
        while not self._closed.is_set():
            begun = time.monotonic()  # a connection made before the database came back is no news when it breaks
            try:
                await self._follow()
            except Exception as exc:  # whatever broke the connection or a read: a new one, then reload
                if self._closed.is_set():
                    return  # asyncpg may turn the cancel of a connect into another error
                if isinstance(exc, (_Lost, ConfigError, *pg_pool.connection_errors())):  # the database is away
                    self._outage.failed(f"following {self._channel!r}", exc, begun)
                else:
                    log.warning(
                        "%s: not following other nodes' changes (%s); retrying in %gs", self._channel, exc, retry_s
                    )
            if self._listening:
                retry_s = RETRY_S  # it worked for a while: the next failure starts over
            self._listening = False
            await wait_event(self._closed, retry_s)
            retry_s = min(retry_s * 2, RETRY_MAX_S)
            self._reconnects += 1

    async def _follow(self) -> None:
        begun = time.monotonic()
        conn = await self._connect()
        self._lost.clear()
        conn.add_termination_listener(self._on_lost)
        try:
            await conn.add_listener(self._channel, self._on_notification)
            await self._refresh(conn, None)  # anything changed while not listening
            self._listening = True
            self._outage.answered(begun)
            log.info("following changes by other nodes on %r", self._channel)
            await self._serve(conn)
        finally:
            conn.terminate()  # never awaits: fine on a dead connection and under cancellation

    async def _serve(self, conn: asyncpg.Connection) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time() + self._interval_s
        while True:
            await wait_event(self._wake, max(0.0, next_full - loop.time()))
            self._wake.clear()
            if self._closed.is_set():
                return  # a cancel turned into another error on the way (see close)
            if self._lost.is_set():
                raise _Lost("the connection was closed")
            if loop.time() >= next_full:
                self._pending.clear()  # the full reload reads them too
                await self._refresh(conn, None)
                next_full = loop.time() + self._interval_s
            elif self._pending:
                changes, self._pending = self._pending, set()
                await self._refresh(conn, changes)

    async def _refresh(self, conn: asyncpg.Connection, changes: set[str] | None) -> None:
        full = changes is None or not all(map(self._understood, changes))  # a newer node's: read all
        named = None if full else changes

        async def read() -> R:
            async with asyncio.timeout(READ_TIMEOUT_S):  # not wait_for: it can swallow close()'s cancel
                return await self._read(conn, named)

        await self._sink.refresh(read, full=full)
        if full:
            self._full_reloads += 1

    def _on_notification(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self._notifications += 1
        self._pending.add(payload)
        self._wake.set()

    def _on_lost(self, conn: Any) -> None:
        self._lost.set()
        self._wake.set()
