"""How a request's wait on PostgreSQL stays bounded, and how `/readyz` asks whether it answers.

A request never waits on the database without a bound: the barrier before a read, the
connection (`store.postgres_acquire_timeout_s`), the query, and an awaited commit
(`create_session`, `commit_message`) each give up after `store.postgres_request_timeout_s`. A bound that
passes, or a connection refused or dropped (`pg_pool.connection_errors`), raises
`StoreUnavailable`: the API answers 503 `store_unavailable` with `Retry-After`. A write that
timed out so was not acknowledged; it may still commit later (the writes are idempotent), so no
acknowledged write is ever lost. Other database errors stay `StoreError` (a bug: 500).

`HealthCheck` runs `SELECT 1` on the pool with short timeouts and keeps the answer for
`CHECK_TTL_S`, so load-balancer probes on every node cannot hammer the database; a probe
arriving while a check runs gets the previous answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentos.errors import AgentOSError, StoreError, StoreUnavailable
from agentos.store.pg_pool import pooled, shown_url

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

T = TypeVar("T")
log = logging.getLogger("agentos.store")

CHECK_TTL_S = 1.0  # a readiness answer is reused this long
CHECK_TIMEOUT_S = 1.0  # SELECT 1 must answer within this


def classify(exc: BaseException, unavailable: tuple[type[Exception], ...], what: str) -> StoreError:
    """`StoreUnavailable` for a database that cannot be reached, else `StoreError`; cause chained.

    An `exc` that is already a `StoreUnavailable` (an earlier write of the node failed on the
    outage, and this operation waited for it) stays one: a turn starting while PostgreSQL
    restarted used to end `internal_error` (found by `agentos bench faults --cluster`)."""
    kind = StoreUnavailable if isinstance(exc, (StoreUnavailable, *unavailable)) else StoreError
    error = kind(f"postgres {what} failed ({type(exc).__name__}: {exc})")
    error.__cause__ = exc
    return error


async def within(awaitable: Awaitable[T], what: str, timeout_s: float) -> T:
    """`await awaitable`, giving up after `timeout_s`.

    Raises:
        StoreUnavailable: the bound passed (the awaitable is cancelled; a queued write stays queued).
    """
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError:
        raise StoreUnavailable(f"postgres: {what} took longer than {timeout_s:g}s") from None


async def bounded_use(
    pool: asyncpg.Pool,
    config: StoreConfig,
    unavailable: tuple[type[Exception], ...],
    use: Callable[[asyncpg.Connection], Awaitable[T]],
    what: str,
) -> T:
    """`use` a connection of `pool` within `store.postgres_request_timeout_s` (as a request would),
    the wait for it included; the driver's errors classified (`unavailable`: its connection errors).

    Raises: StoreUnavailable (unreachable, too slow), StoreError; our own errors unchanged."""

    async def run() -> T:
        async with pooled(pool, config.postgres_acquire_timeout_s) as conn:
            return await use(conn)

    try:
        return await within(run(), what, config.postgres_request_timeout_s)
    except AgentOSError:  # ours (Conflict, NotFound, StoreUnavailable ...) unchanged
        raise
    except Exception as exc:
        raise classify(exc, unavailable, what) from exc


async def bounded_fetch(
    pool: asyncpg.Pool,
    config: StoreConfig,
    unavailable: tuple[type[Exception], ...],
    what: str,
    sql: str,
    *args: Any,
) -> list[Any]:
    """The rows of `sql` on a connection of `pool`: the wait for it bounded by
    `store.postgres_acquire_timeout_s`, the statement by `store.postgres_request_timeout_s`;
    every failure classified (`unavailable`: the driver's connection errors).

    Raises: StoreUnavailable (unreachable, too slow), StoreError."""
    try:
        async with pooled(pool, config.postgres_acquire_timeout_s) as conn:
            rows: list[Any] = await conn.fetch(sql, *args, timeout=config.postgres_request_timeout_s)
    except Exception as exc:
        raise classify(exc, unavailable, what) from exc
    return rows


class Outage:
    """One log line when the database stops answering (what failed, since when) and one when it
    answers again (after how long), for every part of this process that uses it: the store's
    writers, the journal's, the follow connections, the leases. Not a line per failed batch or
    reconnect attempt, and no traceback: an outage is nobody's bug. `outage_of` gives the one
    tracker of a database URL."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.since: float | None = None  # time.monotonic() of the first failure
        self.back_at = float("-inf")  # time.monotonic() the database last answered again
        self.outages = 0  # how many began, for tests and statistics

    def failed(self, what: str, exc: BaseException, started_at: float | None = None) -> None:
        """A connection-level failure of an operation begun at `started_at` (time.monotonic();
        None: just now): the first since the database last answered is logged. An operation
        begun before the database came back (a connection dropped while it was away) is no news."""
        if self.since is not None or (started_at is not None and started_at < self.back_at):
            log.debug("%s: %s failed (%s: %s)", self.name, what, type(exc).__name__, exc)
            return
        self.since = time.monotonic()
        self.outages += 1
        started = time.strftime("%H:%M:%S", time.gmtime())
        reason = str(exc).splitlines()[0] if str(exc) else ""
        log.error(
            "%s: database unreachable since %s UTC (%s failed: %s%s); awaited writes and reads answer "
            "503 store_unavailable, kept writes are retried",
            self.name,
            started,
            what,
            type(exc).__name__,
            f": {reason}" if reason else "",
        )

    def answered(self, started_at: float) -> None:
        """An operation begun at `started_at` (time.monotonic()) succeeded: if it began after the
        outage did, the database answers again and the outage is over. One begun before (a
        commit in flight when the first failure came) proves nothing."""
        if self.since is None or started_at < self.since:
            return
        now = time.monotonic()
        lasted, self.since, self.back_at = now - self.since, None, now
        log.warning("%s: database reachable again after %.1f s", self.name, lasted)


_OUTAGES: dict[str, Outage] = {}


def outage_of(url: str) -> Outage:
    """The outage tracker of the database at `url` in this process (one per database: every
    pool and writer of the node logs through it, so an outage is two lines, not one per part)."""
    key = shown_url(url)
    if key not in _OUTAGES:
        _OUTAGES[key] = Outage(f"postgres {key}")
    return _OUTAGES[key]


class HealthCheck:
    """`await check()` raises `StoreUnavailable` while the database does not answer `SELECT 1`."""

    def __init__(self, acquire_timeout_s: float, outage: Outage | None = None) -> None:
        self._acquire_timeout_s = acquire_timeout_s
        self._outage = outage or Outage("postgres")
        self._checked_at: float | None = None
        self._failure: StoreUnavailable | None = None

    async def check(self, pool: asyncpg.Pool) -> None:
        """Raises: StoreUnavailable: the last check, at most `CHECK_TTL_S` old, failed."""
        now = asyncio.get_running_loop().time()
        if self._checked_at is None or now - self._checked_at >= CHECK_TTL_S:
            self._checked_at = now  # before awaiting: concurrent probes reuse the last answer
            self._failure = await self._select_one(pool)
        if self._failure is not None:
            raise self._failure

    async def _select_one(self, pool: asyncpg.Pool) -> StoreUnavailable | None:
        started = time.monotonic()
        try:
            async with pooled(pool, self._acquire_timeout_s) as conn:
                await conn.fetchval("SELECT 1", timeout=CHECK_TIMEOUT_S)
        except Exception as exc:  # whatever stops SELECT 1, the store is not ready
            self._outage.failed("the health check", exc, started)
            return StoreUnavailable(f"postgres health check failed ({type(exc).__name__}: {exc})")
        self._outage.answered(started)
        return None
