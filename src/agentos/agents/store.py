"""A SQLite database owned by one writer thread, so the event loop never touches the disk.

Every statement goes through one FIFO queue to one thread with one connection. The thread
drains the queue into batches and commits each batch in one transaction; `await write(...)`
returns after the commit that holds its rows (group commit), `write_nowait(...)` does not
wait but is still ordered before every later write. Reads go through the same queue, so a
read sees every write queued before it.

With WAL and `synchronous=NORMAL` a committed batch survives `kill -9` of the server (not
a power cut: that would need `synchronous=FULL`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentos.errors import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")
Op = tuple[str, Sequence[Any]]  # one SQL statement and its parameters
_Reader = Callable[[sqlite3.Connection], Any]


@dataclass(slots=True)
class _Write:
    ops: Sequence[Op]
    future: asyncio.Future[None] | None


@dataclass(slots=True)
class _Read:
    reader: _Reader
    future: asyncio.Future[Any]


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    batches: int
    statements: int
    queued: int


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
    ) -> None:
        self._path = path
        self._schema = schema
        self._migrate = migrate
        self._batch_max_writes = batch_max_writes
        self._queue: queue.SimpleQueue[_Write | _Read | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batches = 0
        self._statements = 0

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="agentos-runs-db", daemon=True)
        self._thread.start()
        await ready

    async def close(self) -> None:
        """Commit everything queued, then stop the thread."""
        if self._thread is None:
            return
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        self._thread = None

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(batches=self._batches, statements=self._statements, queued=self._queue.qsize())

    async def write(self, ops: Sequence[Op]) -> None:
        """Queue `ops` and wait until they are committed.

        Raises:
            StoreError: the batch holding them failed.
        """
        assert self._loop is not None, "store is not open"
        future: asyncio.Future[None] = self._loop.create_future()
        self._queue.put(_Write(ops, future))
        await future

    def write_nowait(self, ops: Sequence[Op]) -> None:
        """Queue `ops` without waiting; a failure is logged."""
        self._queue.put(_Write(ops, None))

    async def read(self, reader: Callable[[sqlite3.Connection], T]) -> T:
        assert self._loop is not None, "store is not open"
        future: asyncio.Future[T] = self._loop.create_future()
        self._queue.put(_Read(reader, future))
        return await future

    # --- the writer thread ---

    def _run(self, ready: asyncio.Future[None]) -> None:
        try:
            db = self._connect()
        except sqlite3.Error as exc:
            self._resolve([(ready, StoreError(f"cannot open runs database: {exc}"))])
            return
        self._resolve([(ready, None)])
        try:
            self._serve(db)
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        target = str(self._path) if self._path is not None else ":memory:"
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(self._schema)
        if self._migrate is not None:
            self._migrate(db)
        return db

    def _serve(self, db: sqlite3.Connection) -> None:
        while True:
            job = self._queue.get()
            batch: list[_Write] = []
            while True:
                if job is None:
                    self._commit(db, batch)
                    return
                if isinstance(job, _Read):
                    self._commit(db, batch)  # a read sees every write queued before it
                    batch = []
                    self._answer(db, job)
                else:
                    batch.append(job)
                if len(batch) >= self._batch_max_writes or self._queue.empty():
                    break
                job = self._queue.get_nowait()
            self._commit(db, batch)

    def _commit(self, db: sqlite3.Connection, writes: list[_Write]) -> None:
        if not writes:
            return
        error: StoreError | None = None
        try:
            db.execute("BEGIN")
            for write in writes:
                for sql, params in write.ops:
                    db.execute(sql, params)
            db.execute("COMMIT")
            self._batches += 1
            self._statements += sum(len(w.ops) for w in writes)
        except (sqlite3.Error, ValueError, TypeError) as exc:  # bad parameters must not kill the thread
            if db.in_transaction:
                db.execute("ROLLBACK")
            error = StoreError(f"runs database write failed: {exc}")
            log.error("%s", error)
        self._resolve([(w.future, error) for w in writes if w.future is not None])

    def _answer(self, db: sqlite3.Connection, job: _Read) -> None:
        try:
            result: Any = job.reader(db)
        except sqlite3.Error as exc:
            result = StoreError(f"runs database read failed: {exc}")
        except Exception as exc:  # the reader's own error (NotFound...) goes to its caller
            result = exc
        self._resolve([(job.future, result)])

    def _resolve(self, outcomes: list[tuple[asyncio.Future[Any], Any]]) -> None:
        if outcomes and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_settle, outcomes)


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, value in outcomes:
        if future.done():
            continue
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
