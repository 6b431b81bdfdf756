"""Connecting to PostgreSQL: the optional driver, the pool, and start-up errors that name the key.

asyncpg is an optional dependency (`pip install 'agentos[postgres]'`) and is imported only
here, only when `store.backend = "postgres"`: the embedded default never loads it. Every
failure to reach the database at start-up becomes one `ConfigError` line naming
`store.postgres_url` (the password is never shown).

`store.postgres_schema` puts every table in one schema (created by the migrations, under their
lock) through every connection's `search_path`, so several installations (or tests) can share one database.
LISTEN/NOTIFY is database-wide, not per schema: every channel is named per schema (`channel`), so
those installations never hear each other's notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from agentos.errors import ConfigError
from agentos.store import pg_migrations

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

CONNECT_TIMEOUT_S = 5.0
CHANNEL_MAX_BYTES = 63  # NAMEDATALEN - 1: pg_notify refuses a longer channel, LISTEN truncates it


def import_asyncpg() -> ModuleType:
    """The asyncpg module.

    Raises:
        ConfigError: it is not installed; the message names the extra that brings it.
    """
    try:
        driver = importlib.import_module("asyncpg")
    except ImportError:
        raise ConfigError(
            "store.backend: postgres needs the asyncpg driver; install it with pip install 'agentos[postgres]'"
        ) from None
    _quiet_pool_log()
    return driver


class _NoFloorTracebacks(logging.Filter):
    """asyncpg's pool logs a warning with a traceback for each failed attempt to reconnect its
    minimum connections while the database is away (11-14 per node for a 4 s restart). The
    outage is logged once each way by `pg_health.Outage` instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to restore the pool connection floor")


def _quiet_pool_log() -> None:
    pool_log = logging.getLogger("asyncpg.pool")
    if not any(isinstance(f, _NoFloorTracebacks) for f in pool_log.filters):
        pool_log.addFilter(_NoFloorTracebacks())


class ConnectionLost(ConnectionError):
    """A connection left in a state the driver cannot go on from (closed under an operation, or
    an operation still in progress: asyncpg's `InternalClientError`). It was terminated; as an
    `OSError` it is one of `connection_errors()`: the database is away, not a row at fault."""


def connection_errors() -> tuple[type[Exception], ...]:
    """The failures that are no row's fault: the server is unreachable, the connection broke or
    timed out, the server is shutting down or out of resources (connections, disk). A batch
    failing so fails whole at once (retrying its rows one by one would only wait longer), and a
    request gets `StoreUnavailable` (503 with Retry-After), not a 500."""
    driver = import_asyncpg()
    exceptions = driver.exceptions
    return (
        OSError,  # ConnectionLost included
        TimeoutError,
        driver.PostgresConnectionError,  # ConnectionDoesNotExistError included: closed mid-operation
        exceptions.InternalClientError,  # a connection left mid-operation by an earlier failure
        exceptions.OperatorInterventionError,  # admin shutdown, cannot connect now, query cancelled
        exceptions.InsufficientResourcesError,  # too many connections, disk full, out of memory
    )


@dataclass(slots=True)
class PoolFigures:
    """Every pool of this process together (a node is one process), for GET /metrics: how many
    connections are lent out, how many units of work wait for one, and how many waited past
    `store.postgres_acquire_timeout_s` (the seed's "pool timeouts": a pool too small for a burst
    shows here first). Counted in `pooled`, the one place that lends connections."""

    in_use: int = 0
    waiting: int = 0
    acquired_total: int = 0
    acquire_timeouts_total: int = 0
    pools: list[asyncpg.Pool] = field(default_factory=list)  # asyncpg's Pool takes no weak reference

    def live(self) -> list[asyncpg.Pool]:
        """The pools not closed, dropping the closed ones from the list."""
        self.pools[:] = [pool for pool in self.pools if not pool.is_closing()]
        return self.pools

    @property
    def open_connections(self) -> int:
        return sum(pool.get_size() for pool in self.live())

    @property
    def max_connections(self) -> int:
        return sum(pool.get_max_size() for pool in self.live())


FIGURES = PoolFigures()


@asynccontextmanager
async def pooled(pool: asyncpg.Pool, timeout_s: float) -> AsyncIterator[asyncpg.Connection]:
    """A connection of `pool` for one unit of work: the one place where every write and read on
    a pool takes its connection, so the rule holds everywhere. A connection whose work was
    cancelled, timed out or failed for any reason but a statement the server refused is
    terminated before it goes back: the pool never hands out a connection in an unknown state
    (an operation still in progress, a half-read answer), it opens a new one instead.

    Raises: whatever the work raised; a driver error that means the connection is gone or
        unusable (an `InterfaceError` on a closed connection, an `InternalClientError`) as
        `ConnectionLost`.
    """
    conn = await _acquire(pool, timeout_s)
    FIGURES.in_use += 1
    try:
        yield conn
    except BaseException as exc:
        if not is_statement_error(exc):
            lost = _driver_lost(exc, conn)
            _terminate(conn)
            if lost:
                raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        raise
    finally:
        FIGURES.in_use -= 1
        await asyncio.shield(pool.release(conn))  # a terminated connection is replaced, not reused


async def _acquire(pool: asyncpg.Pool, timeout_s: float) -> asyncpg.Connection:
    FIGURES.waiting += 1
    try:
        conn: asyncpg.Connection = await pool.acquire(timeout=timeout_s)
    except TimeoutError:
        FIGURES.acquire_timeouts_total += 1
        raise
    finally:
        FIGURES.waiting -= 1
    FIGURES.acquired_total += 1
    return conn


def is_statement_error(exc: BaseException) -> bool:
    """An error the server answered for one statement: the connection is in a known state."""
    driver = import_asyncpg()
    return isinstance(exc, driver.PostgresError) and not isinstance(exc, connection_errors())


def _driver_lost(exc: BaseException, conn: asyncpg.Connection) -> bool:
    exceptions = import_asyncpg().exceptions
    if isinstance(exc, exceptions.InternalClientError):
        return True
    if not isinstance(exc, exceptions.InterfaceError):
        return False
    try:
        return bool(conn.is_closed())
    except exceptions.InterfaceError:  # the pool detached it: its connection was lost
        return True


def _terminate(conn: asyncpg.Connection) -> None:
    """Close the connection now, without a round trip (safe under cancellation). When it was
    lost already, the pool has detached it from `conn` (which then refuses every call) and
    replaces it by itself: nothing left to do."""
    with contextlib.suppress(import_asyncpg().exceptions.InterfaceError):
        conn.terminate()


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    credentials, _, host = rest.rpartition("@")
    return f"{scheme}://{credentials.split(':', 1)[0]}@{host}"


def channel(base: str, schema: str) -> str:
    """The LISTEN/NOTIFY channel `base` of the installation in `schema` (its `current_schema()`).

    A name too long for PostgreSQL ends with a hash of the schema instead of the schema:
    truncating it would give two schemas that share their first letters one channel.
    """
    name = f"{base}_{schema}"
    if len(name.encode()) <= CHANNEL_MAX_BYTES:
        return name
    return f"{base}_{hashlib.sha256(schema.encode()).hexdigest()[:16]}"


def server_settings(schema: str) -> dict[str, str]:
    return {"search_path": schema} if schema else {}


async def connect(config: StoreConfig) -> asyncpg.Connection:
    """One direct connection (migrations, `agentos db`), in the configured schema.

    Raises:
        ConfigError: naming store.postgres_url, when the server cannot be reached or refuses.
    """
    driver = import_asyncpg()
    settings = server_settings(config.postgres_schema)
    try:
        conn: asyncpg.Connection = await driver.connect(
            config.postgres_url, timeout=CONNECT_TIMEOUT_S, server_settings=settings
        )
    except Exception as exc:
        raise unreachable(config.postgres_url, exc) from None
    return conn


@asynccontextmanager
async def migrated(config: StoreConfig) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection with the migrations applied (`pg_migrations.migrate`), closed on exit:
    what each part on PostgreSQL opens first, to set up or read what it needs before its pool.

    Raises:
        ConfigError: as `connect`; MigrationError (a ConfigError): a schema mismatch.
    """
    conn = await connect(config)
    try:
        await pg_migrations.migrate(conn, schema=config.postgres_schema)
        yield conn
    finally:
        await conn.close()


async def migrate(config: StoreConfig) -> None:
    """Apply the pending migrations over a direct connection, for a part that needs nothing else
    of it. Raises: as `migrated`."""
    async with migrated(config):
        pass


async def create_pool(config: StoreConfig) -> asyncpg.Pool:
    """The store's pool: small, with connections in the configured schema.

    Raises:
        ConfigError: naming store.postgres_url, when the server cannot be reached or refuses.
    """
    driver = import_asyncpg()
    options: dict[str, Any] = {"server_settings": server_settings(config.postgres_schema)}
    try:
        pool: asyncpg.Pool = await driver.create_pool(
            config.postgres_url,
            min_size=1,
            max_size=config.postgres_pool_max,
            timeout=CONNECT_TIMEOUT_S,
            command_timeout=30,
            reset=keep_session,
            **options,
        )
    except Exception as exc:
        raise unreachable(config.postgres_url, exc) from None
    FIGURES.pools.append(pool)
    return pool


async def keep_session(conn: asyncpg.Connection) -> None:
    """What a pooled connection needs undone before its next user: nothing beyond what asyncpg
    does itself on every release (roll back a transaction left open, drop the callbacks).

    asyncpg's default sends `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` on each
    release: one more round trip per use, 6% of a cluster node's CPU at 1000 turns (py-spy) and
    work for PostgreSQL too. Nothing here leaves such state on a pooled connection: advisory
    locks are per transaction (`pg_advisory_xact_lock`; the migrations' session lock is on a
    direct connection), `SET LOCAL` only, cursors only inside transactions, every LISTEN on a
    connection of its own (`connect`), and the schema is a startup setting, which RESET ALL
    would keep anyway. A part that ever needs session state takes a direct connection."""
    return None


def check_reachable(config: StoreConfig) -> None:
    """Before anything starts (`agentos serve`): the driver is installed and the server answers.

    Raises:
        ConfigError: one line naming store.backend (no asyncpg) or store.postgres_url.
    """
    asyncio.run(_probe(config))


async def _probe(config: StoreConfig) -> None:
    conn = await connect(config)
    await conn.close()


def unreachable(url: str, exc: BaseException) -> ConfigError:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ConfigError(f"store.postgres_url: cannot connect to {shown_url(url)} ({reason})")
