"""The one writer: a thread that owns one SQLite connection and commits its queue in batches.

Every SQLite file of Agent OS (sessions.db, events.db, access.db, runs.db) has one `Writer`.
The event loop never touches the connection: it enqueues operations, the thread applies a
batch (the `Batcher` decides when) in one transaction and resolves the batch's futures with
a single `call_soon_threadsafe`. Every turn finishing in the same few milliseconds shares
one commit (group commit). Reads go through the same queue, so a read sees every write
enqueued before it. On an idle writer, a write nobody awaits (`put`) waits up to `put_linger_ms`
for others before it wakes the thread; anything awaited wakes it at once and takes them along.

Two lanes share the FIFO, each with its own bound:
- durable (`put`, `submit`): never dropped; callers await `wait_space()` first (backpressure);
- sheddable (`put(..., sheddable=True)`): dropped and counted once its lane is full.

Failures (an operation that raises fails alone; a failed commit is retried once; a dead
thread fails everything instead of hanging) are described and handled in `agentos.store.ops`.
With `retry_puts`, the durable puts of a batch the disk failed are kept and tried again first
(`agentos.store.sqlite_outage`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentos.errors import StoreUnavailable
from agentos.store.base import WriterStatistics
from agentos.store.batching import Batcher
from agentos.store.handoff import Handoff
from agentos.store.lanes import Lanes
from agentos.store.ops import Apply, Operation, apply_batch, connect, died, post
from agentos.store.sqlite_outage import Outage

log = logging.getLogger("agentos.store")

T = TypeVar("T")

_BUSY_WINDOW_S = 0.02  # a batch this recent means the writer is busy
_STOP = Operation(None, None, None, None)


class Writer:
    """Owns one SQLite file. `put()` never blocks; `submit()` awaits the batch's commit.

    Usage::

        writer = Writer("events", path, SCHEMA)
        writer.start()                                   # or `await writer.open()`
        writer.put("INSERT ...", (1, 2), sheddable=True)
        rows = await writer.submit(apply=lambda db: db.execute("SELECT ...").fetchall())
        await writer.close()
    """

    def __init__(
        self,
        name: str,
        path: Path | str | None,
        schema: str,
        *,
        migrate: Callable[[sqlite3.Connection], None] | None = None,
        synchronous: str = "normal",
        queue_max_rows: int = 20_000,
        shed_max_rows: int | None = None,
        batch_max_rows: int = 1000,
        busy_timeout_ms: int = 5000,
        linger_ms: float = 2.0,
        put_linger_ms: float = 0.0,
        on_batch: Callable[[int, float], None] | None = None,
        retry_puts: bool = False,
    ) -> None:
        """`retry_puts`: keep the durable puts of a batch the disk failed and try them again first
        (the session store's files); without it they fail with the batch (the run journal)."""
        self.name = name
        self._failing = False  # the loop's: the last batch's puts were kept for a failing disk
        self._path = path
        self._schema = schema
        self._migrate = migrate
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._batcher: Batcher[Operation] = Batcher(
            max_items=batch_max_rows, linger_s=linger_ms / 1000, busy_window_s=_BUSY_WINDOW_S
        )
        self._nudge = threading.Event()  # ends a linger: set when a read someone waits for comes
        self._handoff: Handoff[Operation] = Handoff(put_linger_ms / 1000)  # a put wakes it this late
        self._inflight: list[Operation] = []  # the batch being applied (failed if the thread dies)
        shed_max = shed_max_rows if shed_max_rows is not None else queue_max_rows
        self._lanes = Lanes(name, queue_max_rows, shed_max, on_batch)  # counted on the loop only
        self._outage = Outage(name, self._batcher, retry_puts, queue_max_rows + shed_max)  # the thread's
        self._retried = 0
        self._truncate_wal = False  # the thread's: set by an apply, done after its batch commits
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._dead: StoreUnavailable | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Open the file on the caller's stack (fail at start-up if it is unusable), start the thread.

        Raises:
            StoreError: the file cannot be opened or its schema applied.
        """
        self._launch(self._connect())

    async def open(self) -> None:
        """`start()`, with the file opened on a worker thread instead of the event loop.

        Raises:
            StoreError: the file cannot be opened or its schema applied.
        """
        self._launch(await asyncio.to_thread(self._connect))

    def _launch(self, conn: sqlite3.Connection) -> None:
        self._loop = self._handoff.loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, args=(conn,), name=f"agentos-{self.name}", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        return connect(
            self.name,
            self._path,
            self._schema,
            synchronous=self._synchronous,
            busy_timeout_ms=self._busy_timeout_ms,
            migrate=self._migrate,
        )

    async def close(self) -> None:
        """Refuse new operations, apply every queued one, then stop the thread."""
        if self._thread is None:
            return
        self._closing = True
        self._handoff.push(_STOP, urgent=True)
        await asyncio.to_thread(self._thread.join)
        self._thread = None

    # -- the loop's side ---------------------------------------------------------------------

    def put(self, sql: str, params: Sequence[Any], *, sheddable: bool = False) -> bool:
        """Enqueue a write and return at once; False if a sheddable one over its bound was dropped.

        Raises:
            StoreError: the writer is closed or dead (a sheddable write is dropped instead).
        """
        # Called per turn for events and messages: one allocation (the Operation), no lock.
        return self._offer(Operation(sql, params, None, None, sheddable))

    def put_apply(self, apply: Apply, *, sheddable: bool = False) -> bool:
        """Enqueue `apply(connection)` as a write and return at once, like `put`; a failure is logged.

        Raises:
            StoreError: the writer is closed or dead (a sheddable write is dropped instead).
        """
        return self._offer(Operation(None, None, apply, None, sheddable))

    def _offer(self, op: Operation) -> bool:
        if op.sheddable and not self._lanes.admit_sheddable(self._refusing()):
            return False
        self._enqueue(op)
        return True

    def submit(
        self, sql: str | None = None, params: Sequence[Any] | None = None, *, apply: Apply | None = None
    ) -> asyncio.Future[Any]:
        """Enqueue an operation; the future resolves once its batch is committed.

        Raises:
            StoreError: the writer is closed or dead (the future fails the same way later).
        """
        assert self._loop is not None, "writer not started"
        future: asyncio.Future[Any] = self._loop.create_future()
        self._enqueue(Operation(sql, params, apply, future))
        return future

    async def run(self, apply: Callable[[sqlite3.Connection], T]) -> T:
        """`apply(conn)` inside a batch's transaction (a read-then-write no other operation can
        come between); its result once that batch is committed.

        Raises:
            StoreError: the writer is closed or dead; what `apply` raised, unchanged.
        """
        result: T = await self.submit(apply=apply)
        return result

    def read(self, apply: Apply) -> asyncio.Future[Any]:
        """`apply(conn)` (a read) run by the thread; the future resolves with its result. Unlike
        `submit`, it never waits for a busy writer's batch to fill (`linger_ms`): its batch, with
        whatever was queued before it (which it sees), is committed at once.

        Raises:
            StoreError: the writer is closed or dead.
        """
        assert self._loop is not None, "writer not started"
        future: asyncio.Future[Any] = self._loop.create_future()
        self._enqueue(Operation(None, None, apply, future, at_once=True))
        self._nudge.set()
        return future

    async def wait_space(self) -> None:
        """Backpressure for writes that must never be dropped: wait until under the bound.

        Raises: StoreUnavailable: the writer died, or its lane is full of writes that wait for
            a failing disk; waiting would never end, or last as long as the outage."""
        await self._lanes.wait_space(lambda: self._dead is not None or self._failing)
        if self._dead is not None:
            raise self._dead
        if self._lanes.queued >= self._lanes.max:
            raise StoreUnavailable(f"{self.name} store: {self._lanes.queued} writes wait for a failing disk")

    def _refusing(self) -> bool:
        return self._thread is None or self._closing or self._dead is not None

    def check(self) -> None:
        """Raises: StoreUnavailable: the writer is closed or its thread died (`/readyz`)."""
        if self._refusing():
            raise self._dead or StoreUnavailable(f"{self.name} writer is closed")

    def _enqueue(self, op: Operation) -> None:
        self.check()
        self._lanes.count_in(op.sheddable)
        self._handoff.push(op, urgent=op.future is not None)

    @property
    def parked(self) -> bool:
        """The thread sleeps until a write or read wakes it (nothing pending, nothing lingering;
        or kept puts wait out a back-off)."""
        return self._handoff.parked

    def statistics(self) -> WriterStatistics:
        return self._lanes.statistics(self._retried)

    def _resolve(self, batch: list[Operation], results: list[Any], failing: bool, wait_ms: float) -> None:
        if failing or self._failing:
            self._failing = failing
            self._lanes.space.set()  # `wait_space()` callers look again: fail, or room was made
        if not batch:
            return
        shed = failed = 0
        for op, result in zip(batch, results, strict=True):
            shed += op.sheddable
            future = op.future
            if isinstance(result, BaseException):
                failed += 1
                if future is not None and not future.done():
                    future.set_exception(result)
            elif future is not None and not future.done():
                future.set_result(result)
        self._lanes.settle(len(batch), shed, failed, wait_ms)

    def _die(self, stranded: list[Operation], exc: BaseException) -> None:
        """On the loop: the thread is gone. Fail what it held, what is queued, and what comes."""
        self._dead = died(self.name, exc)
        stranded.extend(op for op in self._handoff.ops if op is not _STOP)
        self._handoff.ops.clear()
        if stranded:
            self._resolve(stranded, [died(self.name, exc) for _ in stranded], False, 0.0)
        self._lanes.space.set()

    # -- the thread's side ---------------------------------------------------------------------

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            self._serve(conn)
        except BaseException as exc:  # noqa: B036 - the thread's last act: fail everything rather than hang
            log.critical("%s writer thread died", self.name, exc_info=True)
            post(self._loop, self._die, [*self._inflight, *self._batcher.clear()], exc)
        finally:
            conn.close()

    def _serve(self, conn: sqlite3.Connection) -> None:
        batcher, stopping = self._batcher, False
        while True:
            now = time.monotonic()
            stopping = self._pull(now) or stopping
            if wait_s := self._outage.wait_s(now, stopping):  # kept puts alone wait out a back-off
                self._handoff.park(wait_s)  # an operation someone awaits (or a close) wakes it
                continue
            batch = batcher.take(now, flush=stopping)
            if batch:
                self._inflight = batch
                self._apply(conn, batch, stopping)
                self._inflight = []
                continue
            if stopping:
                return
            due = batcher.due_at()
            if due is None:
                self._handoff.park()
            else:  # lingering for the batch to fill; a read someone waits for ends it (`read`)
                self._nudge.wait(due - now)
                self._nudge.clear()

    def _pull(self, now: float) -> bool:
        """Move the handed-over operations into the batcher; True once the stop marker came."""
        ops, add = self._handoff.ops, self._batcher.add
        while ops:
            op = ops.popleft()
            if op is _STOP:
                return True
            self._outage.awaited += op.future is not None
            add(op, now, at_once=op.at_once)
        return False

    def truncate_wal_after_commit(self) -> None:
        """Called by an apply, on the writer's thread: once its batch is committed (before its
        future resolves), checkpoint the WAL and truncate it to nothing. A deletion uses it: the
        WAL still holds the frames that wrote the deleted rows, and `secure_delete` zeroes only
        the database file's pages."""
        self._truncate_wal = True

    def _apply(self, conn: sqlite3.Connection, batch: list[Operation], stopping: bool) -> None:
        applied = apply_batch(conn, batch, self.name)
        if self._truncate_wal:
            self._truncate_wal = False
            _checkpoint(conn, self.name, self._busy_timeout_ms)
        self._retried += applied.retried  # only this thread writes it; the loop reads it for statistics
        wait_ms = (time.perf_counter_ns() - batch[0].enqueued_ns) / 1e6
        post(self._loop, self._resolve, *self._outage.settle(batch, applied, stopping), wait_ms)


def _checkpoint(conn: sqlite3.Connection, name: str, busy_timeout_ms: int) -> None:
    """Copy the WAL into the file and truncate it. Without waiting: a TRUNCATE checkpoint waits
    out every reader of another process (a backup tool may hold one for long) on the busy
    timeout, and the writer's queue would wait with it; when one is there the truncation is
    skipped with a warning, and later checkpoints overwrite the frames."""
    try:
        conn.execute("PRAGMA busy_timeout=0")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error:
        log.warning("%s writer: checkpoint after a deletion failed", name, exc_info=True)
        return
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    if busy:
        log.warning("%s writer: another process reads the file; the WAL after a deletion was not truncated", name)
