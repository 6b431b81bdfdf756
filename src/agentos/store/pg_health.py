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
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from agentos.errors import StoreError, StoreUnavailable

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")

CHECK_TTL_S = 1.0  # a readiness answer is reused this long
CHECK_TIMEOUT_S = 1.0  # SELECT 1 must answer within this


def classify(exc: BaseException, unavailable: tuple[type[Exception], ...], what: str) -> StoreError:
    """`StoreUnavailable` for a database that cannot be reached, else `StoreError`; cause chained."""
    kind = StoreUnavailable if isinstance(exc, unavailable) else StoreError
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


class HealthCheck:
    """`await check()` raises `StoreUnavailable` while the database does not answer `SELECT 1`."""

    def __init__(self, acquire_timeout_s: float) -> None:
        self._acquire_timeout_s = acquire_timeout_s
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
        try:
            async with pool.acquire(timeout=self._acquire_timeout_s) as conn:
                await conn.fetchval("SELECT 1", timeout=CHECK_TIMEOUT_S)
        except Exception as exc:  # whatever stops SELECT 1, the store is not ready
            return StoreUnavailable(f"postgres health check failed ({type(exc).__name__}: {exc})")
        return None
