"""The SQLite side of the one writer: opening a file, one queued operation, and how a batch of
them is applied in one transaction.

Failures, and what they cost:
- an operation that raises (any `Exception`, a bad statement or a reader's decode error)
  fails only its own future; the batch is applied again with a SAVEPOINT around each
  operation, so the other operations' rows commit;
- an error no operation is at fault for (`transient`: the file locked past `busy_timeout_ms`,
  a full disk, an I/O error) fails the whole batch instead: every operation would meet it (a
  locked file would cost each one `busy_timeout_ms`);
- a failed BEGIN or COMMIT, or such a batch, rolls back and retries the whole batch once, then
  fails every future of the batch (`Applied.transient` tells the writer why: it keeps the
  durable puts of some lanes for a later retry, `agentos.store.writer`). Statements must
  therefore be idempotent (upserts on natural keys); a repeat only follows a COMMIT that
  reported failure, after which SQLite has not committed the batch;
- errors reach callers as `StoreError` with the cause chained (a `StoreUnavailable`, 503,
  when the disk is locked, failing or full); our own `AgentOSError`s raised by a reader (a
  NotFound) pass unchanged;
- the thread does not die on an operation's error. A `BaseException` that still kills it
  fails every queued operation, and every later call raises `StoreUnavailable`: nothing hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from agentos.errors import AgentOSError, StoreError, StoreUnavailable

log = logging.getLogger("agentos.store")

Apply = Callable[[sqlite3.Connection], Any]


@dataclass(slots=True, eq=False)
class Operation:
    """A statement with its parameters, or a callable run with the connection; maybe awaited.
    `at_once`: a read someone waits for: its batch is due now, however busy the writer is."""

    sql: str | None
    params: Sequence[Any] | None
    apply: Apply | None
    future: asyncio.Future[Any] | None
    sheddable: bool = False
    at_once: bool = False
    enqueued_ns: int = field(init=False, default_factory=time.perf_counter_ns)


# SQLite's result codes that are the machine's fault, not a statement's: the file is locked
# past busy_timeout, the disk failed or is full, the file cannot be opened.
_UNAVAILABLE_CODES = frozenset(
    {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN}
)

# The errors that pass without a fix to the code or the data, so a batch that met one is worth
# trying again later: another connection holds the file past busy_timeout (BUSY), the disk is
# full (FULL), a read or write of the disk failed (IOERR), a file cannot be opened now (CANTOPEN:
# out of descriptors, the -wal or -shm file). Not LOCKED: with one connection per file and no
# shared cache it is the connection at odds with itself, which the same batch meets again.
_TRANSIENT_CODES = _UNAVAILABLE_CODES - {sqlite3.SQLITE_LOCKED}


def transient(exc: BaseException) -> bool:
    """Whether `exc` is the disk's or another process's doing (`_TRANSIENT_CODES`), no operation's."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and code is not None and code & 0xFF in _TRANSIENT_CODES


class Applied(NamedTuple):
    """What became of a batch."""

    results: list[Any]  # one per operation: its result, or the exception it failed with
    retried: bool  # the first try failed as a whole
    transient: BaseException | None  # the `transient` error the whole batch failed with, twice


def store_error(name: str, exc: BaseException) -> BaseException:
    """The error a caller sees for `exc`: our own errors unchanged, a locked, failing or full
    disk a `StoreUnavailable` (503), anything else a StoreError (a bug: 500)."""
    if isinstance(exc, AgentOSError):
        return exc
    code = getattr(exc, "sqlite_errorcode", None)
    unavailable = isinstance(exc, sqlite3.OperationalError) and code is not None and code & 0xFF in _UNAVAILABLE_CODES
    error = (StoreUnavailable if unavailable else StoreError)(f"{name} store: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def apply_batch(conn: sqlite3.Connection, batch: list[Operation], name: str) -> Applied:
    """Apply `batch` in one transaction, retried once if it fails as a whole (BEGIN, COMMIT, or
    an operation's `transient` error)."""
    try:
        return Applied(_transaction(conn, batch, name), False, None)
    except Exception:  # nothing of the batch is committed; once more
        log.warning("%s writer: a batch of %d failed to commit; retrying it", name, len(batch), exc_info=True)
        _rollback(conn)
    try:
        return Applied(_transaction(conn, batch, name), True, None)
    except Exception as exc:
        log.error("%s writer: a batch of %d failed twice; failing it", name, len(batch), exc_info=True)
        _rollback(conn)
        return Applied([store_error(name, exc) for _ in batch], True, exc if transient(exc) else None)


def _transaction(conn: sqlite3.Connection, batch: list[Operation], name: str) -> list[Any]:
    conn.execute("BEGIN")
    try:
        # The fast path costs no SQL beyond the batch's own statements: at 1000 turns/s a
        # SAVEPOINT/RELEASE pair per operation would triple the statements the thread runs
        # (and the GIL time it takes from the event loop) for a case that almost never happens.
        results = [_run(conn, op) for op in batch]
    except Exception as exc:
        if transient(exc):
            raise  # the disk's fault, not the operation's: the whole batch fails
        # One operation failed. Start over, each operation in its own savepoint, so that
        # only the failing ones are undone and the rest of the batch still commits.
        _rollback(conn)  # the error may have rolled it back already
        conn.execute("BEGIN")
        results = [_run_guarded(conn, op, name) for op in batch]
    conn.execute("COMMIT")
    return results


def _run_guarded(conn: sqlite3.Connection, op: Operation, name: str) -> Any:
    conn.execute("SAVEPOINT op")
    try:
        result = _run(conn, op)
    except Exception as exc:
        if transient(exc):
            raise
        conn.execute("ROLLBACK TO op")
        result = store_error(name, exc)
        if op.future is None:  # nobody awaits it: the log is where it is seen
            log.error("%s writer: a write failed: %s", name, result)
    conn.execute("RELEASE op")
    return result


def _run(conn: sqlite3.Connection, op: Operation) -> Any:
    if op.apply is not None:
        return op.apply(conn)
    assert op.sql is not None
    return conn.execute(op.sql, op.params or ()).rowcount


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        log.exception("rollback failed")


def connect(
    name: str,
    path: Path | str | None,
    schema: str,
    *,
    synchronous: str,
    busy_timeout_ms: int,
    migrate: Callable[[sqlite3.Connection], None] | None,
) -> sqlite3.Connection:
    """Open `path` (None: in memory) in WAL mode and apply `schema` and `migrate`.

    Raises:
        StoreError: the file cannot be opened or its schema applied.
    """
    try:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path or ":memory:"), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # Deleted content is zeroed, not left readable in the page or the free list: a deleted
        # session must leave no copy in the file (docs/deployment.md "Retention" has the cost,
        # measured against an incremental vacuum, which leaves the bytes of pages still in use).
        # Explicit: some builds (Debian's) default to it, others (python.org's) do not.
        conn.execute("PRAGMA secure_delete=ON")
        conn.executescript(schema)
        if migrate is not None:
            migrate(conn)
    except (sqlite3.Error, OSError) as exc:
        detail = getattr(exc, "sqlite_errorname", "")  # SQLITE_IOERR_WRITE says more than "disk I/O error"
        raise StoreError(f"cannot open the {name} database {str(path)!r}: {exc} {detail}".rstrip()) from exc
    return conn


def died(name: str, exc: BaseException) -> StoreUnavailable:
    """The error every operation of a writer whose thread died gets: the store is unavailable
    (503), not a bug of the request's."""
    error = StoreUnavailable(f"{name} writer thread died: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def post(loop: asyncio.AbstractEventLoop | None, callback: Callable[..., None], *args: Any) -> None:
    """From the writer thread: run `callback(*args)` on the loop, unless the loop is gone."""
    if loop is None or loop.is_closed():
        return
    with contextlib.suppress(RuntimeError):  # the loop closed in between: nobody is left to tell
        loop.call_soon_threadsafe(callback, *args)
