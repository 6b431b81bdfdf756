"""Read-only connections to `knowledge.db` for the query path, beside its one writer.

Why: through the writer, a query's reads queue behind the indexer's batches (chunks, their
full-text entries, an fsync each), and two queries' searches run one after the other on the
writer's thread. The file is in WAL mode, so readers on their own connections run alongside the
writer and each other, and never block it.

Each read runs in a worker thread (`asyncio.to_thread`) on that thread's own connection, opened
read-only on first use; every statement is its own read transaction (autocommit), so it sees
every transaction committed before it started: a document that reads `ready` (committed by the
writer with its chunks) has its chunks visible to any read that starts afterwards.

A database in memory (no file) has no second connection: `Readers(None)` runs nothing and the
storage reads through the writer instead.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from agentos.errors import StoreUnavailable

T = TypeVar("T")
_BUSY_TIMEOUT_MS = 5000


class Readers:
    def __init__(self, path: Path) -> None:
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` in a worker thread. Raises: StoreUnavailable once closed or when the
        file cannot be read."""
        return await asyncio.to_thread(self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._connection())
        except (sqlite3.OperationalError, sqlite3.ProgrammingError) as exc:  # ProgrammingError: closed meanwhile
            raise StoreUnavailable(f"knowledge.db cannot be read: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._closed:  # this thread's connection, if it has one, is closed
            raise StoreUnavailable("knowledge.db is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        with self._lock:
            if self._closed:
                raise StoreUnavailable("knowledge.db is closed")
            # check_same_thread=False only so that close() can close it from another thread:
            # it is used by this thread alone
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._opened.append(conn)
        self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every connection (called once no read is running: the storage closes last)."""
        with self._lock:
            self._closed = True
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
