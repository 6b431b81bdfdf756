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
import hashlib
import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from agentos.errors import ConfigError

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
        return importlib.import_module("asyncpg")
    except ImportError:
        raise ConfigError(
            "store.backend: postgres needs the asyncpg driver; install it with pip install 'agentos[postgres]'"
        ) from None


def connection_errors() -> tuple[type[Exception], ...]:
    """The failures that are no row's fault: the server is unreachable, the connection broke or
    timed out, the server is shutting down or out of resources (connections, disk). A batch
    failing so fails whole at once (retrying its rows one by one would only wait longer), and a
    request gets `StoreUnavailable` (503 with Retry-After), not a 500."""
    driver = import_asyncpg()
    exceptions = driver.exceptions
    return (
        OSError,
        TimeoutError,
        driver.PostgresConnectionError,
        exceptions.OperatorInterventionError,  # admin shutdown, cannot connect now, query cancelled
        exceptions.InsufficientResourcesError,  # too many connections, disk full, out of memory
    )


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
            **options,
        )
    except Exception as exc:
        raise unreachable(config.postgres_url, exc) from None
    return pool


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
