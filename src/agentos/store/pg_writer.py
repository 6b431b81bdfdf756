"""The PostgreSQL counterpart of `agentos.store.writer.Writer`: one task per lane, batched commits.

Theory of operation. The event loop enqueues operations (a statement and its parameters) and
returns; one task per writer takes batches (the same `Batcher` policy as SQLite: idle -> at
once, busy -> linger so the batch fills, full -> at once) and applies each batch in ONE
transaction on one pooled connection, consecutive rows of the same statement as one
`executemany` (pipelined by asyncpg: one round trip per run of rows, not per row). The batch's
futures resolve after COMMIT, so `submit()` is a durable acknowledgement (group commit).

Two lanes, as in SQLite: durable (never dropped; callers await `wait_space()`) and sheddable
(dropped and counted once its lane holds `queue_max_rows`). `barrier()` resolves once every
operation queued before it is committed: reads call it first, so a read sees every write
enqueued before it, like the SQLite writer's single queue.

Failures: if a batch's transaction fails on a statement, each operation is applied again alone
in its own transaction, so one bad row fails alone (its future gets a `StoreError`); a
fire-and-forget write that fails is logged and counted. If the database is unreachable, refused
the connection (too many clients) or the connection broke (`fatal_errors`), no row is at fault:
the awaited operations fail at once with `StoreUnavailable` (503, nothing of them was
acknowledged), while the durable fire-and-forget writes (a turn's question) go back to the head
of the queue and are tried again after a back-off (`agentos.store.retry`, shared with the
SQLite writer: 50 ms doubling to 1 s), before anything queued after them (unless the connection
broke in COMMIT, which may have stored them: `CommitUnknown`, nothing is applied twice), and
the awaited operations queued behind them fail at once too. So a write awaited later (a
turn's answer) commits only with or after the writes put before it: a turn whose answer was
acknowledged never lacks its question because a batch before it met a full database.
Sheddable writes are dropped and counted, as when their lane is full.

A write refused by the turn fence (SQLSTATE `AOS01`, `agentos.store.pg_fence`) fails alone the
same way, as `StaleTurn`, counted in `stale_total`: a superseded turn's write, not an error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from agentos.errors import StaleTurn, StoreError, StoreUnavailable
from agentos.store.base import WriterStatistics
from agentos.store.batching import Batcher
from agentos.store.lanes import Lanes
from agentos.store.pg_fence import STALE_SQLSTATE
from agentos.store.pg_health import Outage
from agentos.store.pg_pool import is_statement_error, pooled
from agentos.store.retry import Backoff, split
from agentos.waiting import wait_event

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("agentos.store")

_BUSY_WINDOW_S = 0.02


class CommitUnknown(Exception):
    """The connection broke while COMMIT was under way: the batch may or may not be stored."""


class PgOp(NamedTuple):
    sql: str | None  # None: a barrier
    params: Sequence[Any]
    future: asyncio.Future[None] | None
    sheddable: bool


class PgWriter:
    """One lane of writes to PostgreSQL. `put()` never blocks; `submit()` awaits the commit."""

    def __init__(
        self,
        name: str,
        pool: asyncpg.Pool,
        *,
        acquire_timeout_s: float,
        queue_max_rows: int = 20_000,
        batch_max_rows: int = 1000,
        linger_ms: float = 2.0,
        on_batch: Callable[[int, float], None] | None = None,
        fatal_errors: tuple[type[Exception], ...] = (),
        retry_puts: bool = False,
        outage: Outage | None = None,
    ) -> None:
        """`retry_puts`: keep the durable puts of a batch that found no database, and try them
        again first (the session store's lanes); without it they fail with the batch (the run
        journal: a run whose writes fail stops, and its next owner resumes it from the journal)."""
        self.name = name
        self._outage = outage or Outage(f"postgres ({name})")  # the node's one tracker, when given
        self._retry_puts = retry_puts
        self._fatal_errors = fatal_errors
        self._pool = pool
        self._acquire_timeout_s = acquire_timeout_s
        self._lanes = Lanes(name, queue_max_rows, queue_max_rows, on_batch)  # counted on the loop only
        self._batcher: Batcher[PgOp] = Batcher(
            max_items=batch_max_rows, linger_s=linger_ms / 1000, busy_window_s=_BUSY_WINDOW_S
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._inflight = 0  # operations of the batch being applied
        self._awaited = 0  # queued operations someone awaits (submits, barriers)
        self._urgent = asyncio.Event()  # set when one is queued, or at close
        self._backoff = Backoff()  # kept durable writes wait for the database until `.until` (loop time)
        self.stale_total = 0  # writes refused by the turn fence (a newer turn of their session)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve(), name=f"agentos-pg-{self.name}")

    async def close(self) -> None:
        """Refuse new operations, commit every queued one, then stop."""
        if self._task is None:
            return
        self._closing = True
        self._wake.set()
        self._urgent.set()
        await self._task
        self._task = None

    # -- the loop's side ---------------------------------------------------------------------

    def put(self, sql: str, params: Sequence[Any], *, sheddable: bool = False) -> bool:
        """Enqueue a write; False if a sheddable one was dropped (its lane is full or closed).

        Raises:
            StoreError: the writer is closed (a sheddable write is dropped instead).
        """
        if sheddable and not self._lanes.admit_sheddable(self._refusing()):
            return False
        self._enqueue(PgOp(sql, params, None, sheddable))
        return True

    def submit(self, sql: str, params: Sequence[Any]) -> asyncio.Future[None]:
        """Enqueue a write; the future resolves once its batch is committed.

        Raises:
            StoreError: the writer is closed.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(PgOp(sql, params, future, False))
        return future

    async def barrier(self) -> None:
        """Return once every operation queued before the call is committed (or failed)."""
        if not len(self._batcher) and not self._inflight:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(PgOp(None, (), future, False))
        await future

    async def wait_space(self) -> None:
        """Backpressure for writes that are never dropped: wait until the lane is under its bound."""
        await self._lanes.wait_space(self._refusing)

    def _refusing(self) -> bool:
        return self._task is None or self._closing

    def check(self) -> None:
        """Raises: StoreUnavailable: the writer is closed (`/readyz`)."""
        if self._refusing():
            raise StoreUnavailable(f"{self.name} writer is closed")

    def _enqueue(self, op: PgOp) -> None:
        self.check()
        self._lanes.count_in(op.sheddable)
        self._batcher.add(op, asyncio.get_running_loop().time())
        if op.future is not None:
            self._awaited += 1
            self._urgent.set()
        self._wake.set()

    def statistics(self) -> WriterStatistics:
        return self._lanes.statistics()

    # -- the task ----------------------------------------------------------------------------

    async def _serve(self) -> None:
        loop, batcher = asyncio.get_running_loop(), self._batcher
        while True:
            now = loop.time()
            if now < self._backoff.until and not self._closing and not self._awaited:
                # Kept puts alone wait out the back-off; a write or read someone awaits (or a
                # close) tries at once, as it would have without them: no added latency.
                await wait_event(self._urgent, self._backoff.until - now)
                self._urgent.clear()
                continue
            batch = batcher.take(now, flush=self._closing)
            if batch:
                self._inflight = len(batch)
                await self._apply(batch)
                self._inflight = 0
                continue
            if self._closing:
                return
            due = batcher.due_at()
            self._wake.clear()
            await wait_event(self._wake, None if due is None else max(0.0, due - now))

    async def _apply(self, batch: list[PgOp]) -> None:
        started = asyncio.get_running_loop().time()
        begun = time.monotonic()  # the outage tracker's clock (the loop's may be uvloop's own)
        results: list[BaseException | None] = [None] * len(batch)
        try:
            reached = await self._commit(batch)
        except CommitUnknown as exc:  # the connection broke in COMMIT: fail them all, retry none
            self._outage.failed(f"{self.name}: a commit of {len(batch)}", exc.__cause__ or exc, begun)
            reason = f"{self.name}: database unreachable while committing ({exc.__cause__})"
            results = [StoreUnavailable(reason) for _ in batch]
        except self._fatal_errors as exc:  # no row's fault: the awaited ones fail, durable puts wait
            batch = self._keep_for_retry(batch, exc, begun)
            reason = f"{self.name}: database unreachable ({type(exc).__name__}: {exc})"
            results = [StoreUnavailable(reason) for _ in batch]
        except Exception as exc:  # a row's fault, perhaps: find the guilty rows one by one
            log_failure = log.info if _is_stale(exc) else log.warning
            log_failure("%s batch of %d failed (%s); applying each alone", self.name, len(batch), exc)
            results = [await self._apply_alone(op) for op in batch]
        else:
            self._backoff.succeeded()
            if reached:  # a batch of barriers alone proves nothing about the database
                self._outage.answered(begun)
        self._resolve(batch, results, (asyncio.get_running_loop().time() - started) * 1000)

    def _keep_for_retry(self, batch: list[PgOp], exc: BaseException, begun: float) -> list[PgOp]:
        """Put the batch's durable puts back at the head of the queue for after the back-off (not
        while closing: nothing would try them); the rest, and the awaited operations queued
        behind (which may be more than a batch away), to fail."""
        retry = self._retry_puts and not self._closing
        kept, rest = split(batch, _durable_put) if retry else ([], batch)
        now = asyncio.get_running_loop().time()
        self._batcher.requeue(kept, now)
        self._outage.failed(f"{self.name}: a batch of {len(batch)}", exc, begun)
        if not kept:
            return batch
        delay_s = self._backoff.failed(now)
        log.debug("%s: %d durable writes kept, tried again in %.2fs", self.name, len(kept), delay_s)
        return [*rest, *self._batcher.remove(lambda op: op.future is not None)]

    async def _commit(self, batch: Sequence[PgOp]) -> bool:
        """Apply the batch in one transaction; False when it held no statement (barriers only)."""
        runs: list[tuple[str, list[Sequence[Any]]]] = []
        for op in batch:
            if op.sql is None:
                continue
            if runs and runs[-1][0] == op.sql:
                runs[-1][1].append(op.params)
            else:
                runs.append((op.sql, [op.params]))
        if not runs:
            return False
        async with pooled(self._pool, self._acquire_timeout_s) as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                for sql, rows in runs:
                    await conn.executemany(sql, rows)
            except Exception as exc:
                if is_statement_error(exc):  # else `pooled` terminates the connection: no rollback on it
                    await transaction.rollback()
                raise
            try:
                await transaction.commit()
            except self._fatal_errors as exc:  # it may have committed: never apply it twice
                raise CommitUnknown(exc) from exc
        return True

    async def _apply_alone(self, op: PgOp) -> BaseException | None:
        begun = time.monotonic()
        try:
            await self._commit([op])
        except CommitUnknown as exc:
            self._outage.failed(f"{self.name}: a commit", exc.__cause__ or exc, begun)
            return StoreUnavailable(f"{self.name}: database unreachable while committing ({exc.__cause__})")
        except Exception as exc:
            kind = StoreUnavailable if isinstance(exc, self._fatal_errors) else StoreError
            kind = StaleTurn if _is_stale(exc) else kind
            return kind(f"{self.name}: write failed ({type(exc).__name__}: {exc})")
        return None

    def _resolve(self, batch: list[PgOp], results: list[BaseException | None], wait_ms: float) -> None:
        shed = failed = 0
        for op, error in zip(batch, results, strict=True):
            shed += op.sheddable
            if isinstance(error, StaleTurn):
                self.stale_total += 1
            elif error is not None:
                failed += 1
                if op.future is None:  # an unreachable database is the outage's two lines, not one per row
                    (log.debug if isinstance(error, StoreUnavailable) else log.error)("%s", error)
            if op.future is not None:
                self._awaited -= 1
            if op.future is not None and not op.future.done():
                if error is None:
                    op.future.set_result(None)
                else:
                    op.future.set_exception(error)
        self._lanes.settle(len(batch), shed, failed, wait_ms)


def _durable_put(op: PgOp) -> bool:
    """A durable write nobody awaits: what a batch that found no database keeps for a retry."""
    return op.sql is not None and op.future is None and not op.sheddable


def _is_stale(exc: BaseException) -> bool:
    """A write refused by `agentos_turn_fence` (migration 0004): its turn was superseded."""
    return getattr(exc, "sqlstate", None) == STALE_SQLSTATE
