"""The `runs.db` journal store: a thin user of the one writer (`agentos.store.writer.Writer`).

Every statement goes through the writer's FIFO queue to its thread and connection. The
thread commits the queue in batches; `await write(...)` returns after the commit that holds
its rows (group commit), `write_nowait(...)` does not wait but is still ordered before every
later write. Reads go through the same queue, so a read sees every write queued before it.
Failures follow the writer's policy: one failing write fails alone (the rest of its batch
commits), a failed commit is retried once, and callers get `StoreError`.

With WAL and `synchronous=NORMAL` a committed batch survives `kill -9` of the server (not
a power cut: that would need `synchronous=FULL`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from agentos.store.base import WriterStatistics
from agentos.store.writer import Writer

T = TypeVar("T")
Op = tuple[str, Sequence[Any]]  # one SQL statement and its parameters


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    batches: int
    statements: int  # statements queued in total
    queued: int
    dropped_total: int = 0  # sheddable writes dropped over the bound
    failed_total: int = 0  # writes and reads that failed with StoreError

    @classmethod
    def of(cls, writer: WriterStatistics, statements: int) -> StoreStatistics:
        """The journal's figures from its writer's (either backend's) and its statement count."""
        return cls(
            batches=writer.batches_total,
            statements=statements,
            queued=writer.queued + writer.shed_queued,
            dropped_total=writer.dropped_total,
            failed_total=writer.failed_total,
        )


class RunStore:
    """The `runs.db` connection and its writer thread.

    Usage::

        store = RunStore(Path("data/runs.db"), schema=SCHEMA)
        await store.open()
        await store.write([("INSERT ...", (1, 2))])
        rows = await store.read(lambda db: db.execute("SELECT ...").fetchall())
        await store.close()
    """

    def __init__(
        self,
        path: Path | None,
        *,
        schema: str,
        migrate: Callable[[sqlite3.Connection], None] | None = None,
        batch_max_writes: int = 1000,
        queue_max_rows: int = 20_000,
        linger_ms: float = 2.0,
    ) -> None:
        self._path = path
        self._writer = Writer(
            "runs",
            path,
            schema,
            migrate=migrate,
            batch_max_rows=batch_max_writes,
            queue_max_rows=queue_max_rows,
            linger_ms=linger_ms,
        )
        self._statements = 0

    @property
    def path(self) -> Path | None:
        """The database file; None for an in-memory journal."""
        return self._path

    async def open(self) -> None:
        """Open the database (its schema and migrations applied) and start the writer thread.

        Raises:
            StoreError: the file cannot be opened or migrated.
        """
        await self._writer.open()

    async def close(self) -> None:
        """Commit everything queued, then stop the thread."""
        await self._writer.close()

    def statistics(self) -> StoreStatistics:
        return StoreStatistics.of(self._writer.statistics(), self._statements)

    async def wait_space(self) -> None:
        """Wait until the durable lane is under its bound (backpressure for `write_nowait`).

        Raises:
            StoreError: the writer thread died.
        """
        await self._writer.wait_space()

    async def write(self, ops: Sequence[Op]) -> None:
        """Queue `ops` and wait until they are committed, all of them or none.

        Raises:
            StoreError: the writes failed (their savepoint was rolled back) or their batch did.
        """
        self._statements += len(ops)
        await self._writer.submit(apply=partial(_execute, ops))

    def write_nowait(self, ops: Sequence[Op], *, sheddable: bool = False) -> None:
        """Queue `ops` without waiting; a failure is logged.

        Args:
            sheddable: the writes may be dropped (and counted) when the sheddable lane is full.

        Raises:
            StoreError: the store is closed or its writer died.
        """
        self._statements += len(ops)
        if len(ops) == 1:  # the common case (one event): no closure to allocate
            sql, params = ops[0]
            self._writer.put(sql, params, sheddable=sheddable)
        else:
            self._writer.put_apply(partial(_execute, ops), sheddable=sheddable)

    async def read(self, reader: Callable[[sqlite3.Connection], T]) -> T:
        """Run `reader` on the writer's thread, after every write queued before it, without
        waiting for a busy writer's batch to fill (`Writer.read`).

        Raises:
            StoreError: the reader failed (any exception; our own `AgentOSError`s pass unchanged).
        """
        result: T = await self._writer.read(reader)
        return result

    async def apply(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` (which may write) in the writer's transaction; return once it is committed.

        `fn`'s writes commit together or not at all (it runs in its own savepoint if another
        operation of its batch fails).

        Raises:
            StoreError: `fn` failed (its writes are rolled back) or its batch failed to commit.
        """
        result: T = await self._writer.submit(apply=fn)
        return result

    async def delete(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`apply(fn)` for a deletion: once it is committed the WAL is checkpointed and truncated,
        so that no copy of the deleted rows stays readable (`Writer.truncate_wal_after_commit`;
        the file's own pages are zeroed by `secure_delete`).

        Raises:
            StoreError: as `apply`.
        """
        writer = self._writer

        def wiping(db: sqlite3.Connection) -> T:
            writer.truncate_wal_after_commit()
            return fn(db)

        return await self.apply(wiping)


def _execute(ops: Sequence[Op], db: sqlite3.Connection) -> None:
    for sql, params in ops:
        db.execute(sql, params)
