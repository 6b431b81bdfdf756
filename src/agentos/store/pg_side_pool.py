"""A small pool of its own for a part that keeps its tables in the store's PostgreSQL database
(knowledge, triggers, schedules): the migrations run at open, every call is bounded and its failures are
classified as the store's are (unreachable or too slow: `StoreUnavailable`, a 503).

Usage::

    db = SidePool(settings.store, "knowledge")
    await db.open()                                  # migrate, then min(4, postgres_pool_max) connections
    rows = await db.use(lambda conn: conn.fetch("SELECT ..."), "knowledge read")
    rows = await db.fetch("knowledge read", "SELECT ...")   # the same, for one statement
    await db.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from agentos.store import pg_pool
from agentos.store.pg_health import bounded_use

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

T = TypeVar("T")

SIZE = 4  # short statements; the store's and the journal's pools carry the turns
_CLOSE_TIMEOUT_S = 5.0


class SidePool:
    def __init__(self, config: StoreConfig, name: str) -> None:
        self.config = config
        self._name = name
        self._pool: asyncpg.Pool | None = None
        self._unavailable: tuple[type[Exception], ...] = ()

    async def open(self) -> None:
        """Migrate, then open the pool.

        Raises:
            ConfigError: naming store.postgres_url (unreachable, a schema mismatch) or
                store.backend (no asyncpg).
        """
        self._unavailable = pg_pool.connection_errors()
        await pg_pool.migrate(self.config)
        size = min(SIZE, self.config.postgres_pool_max)
        self._pool = await pg_pool.create_pool(msgspec.structs.replace(self.config, postgres_pool_max=size))

    async def close(self) -> None:
        if self._pool is None:
            return
        try:
            await asyncio.wait_for(self._pool.close(), _CLOSE_TIMEOUT_S)
        except TimeoutError:  # a database that stopped answering: drop the connections
            self._pool.terminate()
        self._pool = None

    async def use(self, use: Callable[[asyncpg.Connection], Awaitable[T]], what: str) -> T:
        """`use` a pooled connection within `store.postgres_request_timeout_s`.

        Raises: StoreUnavailable (unreachable, too slow), StoreError; our own errors unchanged."""
        assert self._pool is not None, "open() first"
        return await bounded_use(self._pool, self.config, self._unavailable, use, what)

    async def fetch(self, what: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        """The rows of `sql`, bounded and classified as `use` is."""
        rows: list[asyncpg.Record] = await self.use(lambda conn: conn.fetch(sql, *args), what)
        return rows

    async def execute(self, what: str, sql: str, *args: Any) -> int:
        """How many rows `sql` changed, bounded and classified as `use` is."""
        status: str = await self.use(lambda conn: conn.execute(sql, *args), what)
        return int(status.rsplit(" ", 1)[-1])
