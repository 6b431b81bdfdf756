"""The node's connection to Redis, and what it does when Redis stops answering.

Start-up is strict: a configured Redis that does not answer stops the server with one line
naming `coordination.redis_url`. Later, Redis going away must not hang or fail requests: every
call has a short socket timeout (`coordination.timeout_s`, redis-py's own retries off) and
`Link.call` turns any failure into None, which the callers answer from their in-process
fallback. The first failure of an outage is logged once; for `RETRY_S` after it no call is
tried (a Redis that accepts and never answers would otherwise cost every request a timeout),
then the next call first probes it with a PING; the first answer is logged once as the end of
the outage and runs the `when_back` callbacks before anything else is sent (the quotas seed
Redis again with SET NX, in case it came back empty after a restart).

A call that fails on a broken connection is tried once more on a fresh one, after the pool's idle
connections are dropped: a Redis that restarted leaves every pooled connection broken, and each
would otherwise cost one more "outage" (a second of deciding alone) as it is used and fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from agentos.config import CoordinationConfig
from agentos.errors import ConfigError

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("agentos.coordination")

T = TypeVar("T")
RETRY_S = 1.0
POOL_MAX = 100  # connections to Redis per node; more calls at once wait for one (see open_link)


class Link:
    """A Redis client with outage tracking. `prefix` starts every key this node writes."""

    def __init__(self, redis: Redis, config: CoordinationConfig, *, retry_s: float = RETRY_S) -> None:
        self.redis = redis
        self.prefix = config.key_prefix
        self.expected_nodes = config.expected_nodes
        self._timeout_s = config.timeout_s
        self._retry_s = retry_s
        self._down = False
        self._skip_until = 0.0
        self._when_back: list[Callable[[], Awaitable[None]]] = []
        self._recovering = False  # one request probes and re-seeds; the others fall back meanwhile

    @property
    def retry_s(self) -> float:
        """How long after a failure the link tries Redis again."""
        return self._retry_s

    @property
    def down(self) -> bool:
        """Redis failed the last call (the outage has not ended)."""
        return self._down

    def when_back(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run `callback()` each time Redis answers again after an outage, before other calls."""
        self._when_back.append(callback)

    async def call(self, fn: Callable[[], Awaitable[T]], *, recovery: bool = False) -> T | None:
        """`fn()`'s result, or None when Redis is down, failed or too slow (logged once an outage).
        `recovery`: a `when_back` callback's own call, which goes through while it runs."""
        if not recovery and (self._down or self._recovering) and not await self._back():
            return None
        try:
            return await self._twice(fn)
        except (OSError, TimeoutError, _redis_error()) as exc:
            self._failed(exc)
            return None

    async def _twice(self, fn: Callable[[], Awaitable[T]]) -> T:
        """`fn()`, and once more on a fresh connection if its connection was broken."""
        try:
            return await self._once(fn)
        except TimeoutError:  # an OSError too, but not a broken connection: no second wait
            raise
        except (ConnectionError, _connection_error()):
            await self.redis.connection_pool.disconnect(inuse_connections=False)
            return await self._once(fn)

    async def _once(self, fn: Callable[[], Awaitable[T]]) -> T:
        async with asyncio.timeout(self._timeout_s * 2):  # the socket timeout, with room for a reconnect
            return await fn()

    async def _back(self) -> bool:
        """During an outage: whether Redis answers a PING again (tried at most once per
        `retry_s`). When it does, the `when_back` callbacks run before anything else is sent."""
        if self._recovering or time.monotonic() < self._skip_until:
            return False
        self._recovering = True
        try:
            try:
                await self._twice(self.redis.ping)
            except (OSError, TimeoutError, _redis_error()) as exc:
                self._failed(exc)
                return False
            self._down = False
            log.warning("coordination: Redis answers again; rate limits and quotas are cluster-wide again")
            for callback in self._when_back:
                await _quietly(callback)
            return True
        finally:
            self._recovering = False

    def _failed(self, exc: BaseException) -> None:
        self._skip_until = time.monotonic() + self._retry_s
        if not self._down:
            self._down = True
            log.warning(
                "coordination: Redis unreachable (%s); each node applies its share of the rate limits "
                "and its own quota counts until it answers",
                type(exc).__name__,
            )

    async def close(self) -> None:
        await self.redis.aclose()


async def _quietly(callback: Callable[[], Awaitable[None]]) -> None:
    try:
        await callback()
    except Exception:  # a callback calls Redis through `call`, which fails quietly; anything else is a bug
        log.exception("coordination: a recovery callback failed")


def _connection_error() -> type[Exception]:
    from redis.exceptions import ConnectionError as RedisConnectionError

    error: type[Exception] = RedisConnectionError
    return error


def _redis_error() -> type[Exception]:
    from redis.exceptions import RedisError

    error: type[Exception] = RedisError
    return error


async def open_link(config: CoordinationConfig) -> Link:
    """Connect to `config.redis_url` and check that Redis answers.

    Raises:
        ConfigError: the `redis` package is missing, or Redis does not answer (naming the key).
    """
    try:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
    except ImportError:
        raise ConfigError(
            "coordination.redis_url is set but the redis package is missing: pip install 'agentos[redis]'"
        ) from None
    timeout = config.timeout_s
    # A blocking pool: a call past POOL_MAX connections in use waits (up to the timeout) for one
    # to come back. redis-py's default pool (100 since redis 6; unbounded in 5) refuses it with
    # MaxConnectionsError at once, which read as "Redis unreachable" at 1000 turns a node: the
    # cluster-wide limits fell back to per-node ones while Redis was fine.
    pool = BlockingConnectionPool.from_url(
        config.redis_url,
        max_connections=POOL_MAX,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    redis = Redis.from_pool(pool)
    try:
        await _first_ping(redis, timeout)
    except Exception as exc:
        await redis.aclose()
        where = _public(config.redis_url)
        raise ConfigError(f"coordination.redis_url: Redis at {where} does not answer ({type(exc).__name__})") from None
    return Link(redis, config)


async def _first_ping(redis: Any, timeout_s: float) -> None:
    """Ping up to three times: one answer slower than the socket timeout (a busy machine at
    start-up) must not stop the server; a Redis that is not there fails all three."""
    for attempt in range(3):
        try:
            async with asyncio.timeout(timeout_s * 4):
                await redis.ping()
            return
        except Exception:
            if attempt == 2:
                raise


def _public(url: str) -> str:
    """The URL without its password, for a message."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"


class BackgroundCalls:
    """Calls to Redis nobody waits for (a refund, a count), each bounded by the link's timeout,
    kept referenced until done; `flush` waits for those started so far (before the link closes)."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
