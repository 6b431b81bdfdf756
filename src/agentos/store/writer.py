"""A background writer thread: one SQLite connection, batched, one transaction per batch.

The event loop never touches the connection. It enqueues operations; the thread takes as
many as are waiting (up to `batch_max_rows`), applies them in one transaction and resolves
the batch's futures with a single `call_soon_threadsafe`, which is what group commit means
here: every turn finishing in the same few milliseconds shares one commit.

Reads go through the same queue, so a read always sees every write enqueued before it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.errors import StoreError

log = logging.getLogger("agentos.store")

Apply = Callable[[sqlite3.Connection], Any]
_Result = tuple["asyncio.Future[Any]", Any, BaseException | None]


@dataclass(frozen=True, slots=True)
class WriterStatistics:
    name: str
    queued: int
    written_total: int
    dropped_total: int
    batches_total: int


class _Op:
    __slots__ = ("sql", "params", "apply", "future", "enqueued_ns")

    def __init__(
        self,
        sql: str | None,
        params: Sequence[Any] | None,
        apply: Apply | None,
        future: asyncio.Future[Any] | None,
    ) -> None:
        self.sql = sql
        self.params = params
        self.apply = apply
        self.future = future
        self.enqueued_ns = time.perf_counter_ns()


_STOP = _Op(None, None, None, None)
_BUSY_WINDOW_S = 0.02  # a batch this recent means the writer is busy


class Writer:
    """Owns one SQLite file. `put()` never blocks; `submit()` awaits the batch's commit."""

    def __init__(
        self,
        name: str,
        path: Path | str,
        schema: str,
        *,
        synchronous: str = "normal",
        queue_max_rows: int = 20_000,
        batch_max_rows: int = 1000,
        busy_timeout_ms: int = 5000,
        linger_ms: float = 2.0,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.name = name
        self._path = str(path)
        self._schema = schema
        self._synchronous = synchronous
        self._max = queue_max_rows
        self._batch_max = batch_max_rows
        self._busy_timeout_ms = busy_timeout_ms
        self._on_batch = on_batch
        self._linger_s = linger_ms / 1000
        self._last_batch_s = 0.0
        self._pause = threading.Event()  # never set: a sleep that ruff's time.sleep ban allows here
        # A deque, not a queue.Queue: an append is one atomic op with no lock and no wake-up.
        # The thread is woken through `_wake` only when it parked itself on an empty deque.
        self._ops: deque[_Op] = deque()
        self._wake = threading.Event()
        self._parked = False
        self._queued = 0  # approximate; only the loop increments, only the thread decrements
        self._written = self._dropped = self._batches = 0
        self._space = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        conn = self._connect()  # fail at start-up, on the caller's stack, if the file is unusable
        self._thread = threading.Thread(target=self._run, args=(conn,), name=f"agentos-{self.name}", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous.upper()}")
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
        conn.executescript(self._schema)
        return conn

    async def close(self) -> None:
        """Drain every queued operation, then stop the thread."""
        if self._thread is None:
            return
        self._push(_STOP)
        await asyncio.to_thread(self._thread.join)
        self._thread = None

    # -- the loop's side ---------------------------------------------------------------------

    def put(self, sql: str, params: Sequence[Any], *, sheddable: bool = False) -> bool:
        """Enqueue a write and return at once. A sheddable write over the bound is dropped."""
        if sheddable and self._queued >= self._max:
            self._dropped += 1
            return False
        self._enqueue(_Op(sql, params, None, None))
        return True

    def submit(
        self, sql: str | None = None, params: Sequence[Any] | None = None, *, apply: Apply | None = None
    ) -> asyncio.Future[Any]:
        """Enqueue an operation; the future resolves once its batch is committed."""
        assert self._loop is not None, "writer not started"
        future: asyncio.Future[Any] = self._loop.create_future()
        self._enqueue(_Op(sql, params, apply, future))
        return future

    async def wait_space(self) -> None:
        """Backpressure for writes that must never be dropped: wait until under the bound."""
        while self._queued >= self._max:
            self._space.clear()
            await self._space.wait()

    def _enqueue(self, op: _Op) -> None:
        if self._thread is None:
            raise StoreError(f"{self.name} writer is closed")
        self._queued += 1
        self._push(op)

    def _push(self, op: _Op) -> None:
        self._ops.append(op)
        if self._parked:
            self._parked = False
            self._wake.set()

    def statistics(self) -> WriterStatistics:
        return WriterStatistics(self.name, max(self._queued, 0), self._written, self._dropped, self._batches)

    # -- the thread's side ---------------------------------------------------------------------

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                batch = self._take()
                stop = batch[-1] is _STOP
                if stop:
                    batch.pop()
                if batch:
                    self._apply(conn, batch)
                    self._last_batch_s = time.monotonic()
                if stop:
                    return
        finally:
            conn.close()

    def _take(self) -> list[_Op]:
        self._wait_for_work()
        # Under load, linger a moment so the batch fills: fewer transactions, and fewer
        # wake-ups of this thread. Idle, commit at once: a lone turn pays no window.
        if self._linger_s and time.monotonic() - self._last_batch_s < _BUSY_WINDOW_S:
            self._pause.wait(self._linger_s)
        batch: list[_Op] = []
        ops = self._ops
        while ops and len(batch) < self._batch_max:
            batch.append(ops.popleft())
            if batch[-1] is _STOP:
                break
        return batch

    def _wait_for_work(self) -> None:
        while not self._ops:
            self._wake.clear()
            self._parked = True
            if self._ops:  # an op landed between the check and parking: do not sleep on it
                self._parked = False
                return
            self._wake.wait()

    def _apply(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        results: list[_Result] = []
        try:
            conn.execute("BEGIN")
            for op in batch:
                result = self._apply_one(conn, op)
                if op.future is not None:
                    results.append((op.future, result, None))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            log.exception("%s writer: batch of %d failed", self.name, len(batch))
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            results = [(op.future, None, exc) for op in batch if op.future is not None]
        self._written += len(batch)
        self._batches += 1
        now_ns = time.perf_counter_ns()
        wait_ms = (now_ns - batch[0].enqueued_ns) / 1e6
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._resolve, results, len(batch), wait_ms)

    @staticmethod
    def _apply_one(conn: sqlite3.Connection, op: _Op) -> Any:
        if op.apply is not None:
            return op.apply(conn)
        assert op.sql is not None
        return conn.execute(op.sql, op.params or ()).rowcount

    def _resolve(self, results: list[_Result], n: int, wait_ms: float) -> None:
        self._queued -= n
        if self._queued < self._max:
            self._space.set()
        for future, result, exc in results:
            if future.cancelled():
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)
        if self._on_batch is not None:
            self._on_batch(n, wait_ms)
