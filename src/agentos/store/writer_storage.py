"""`WriterStorage`: a storage kept in one SQLite file (None: in memory) with every statement run
by its `Writer` thread; the schedules' and the triggers' SQLite storages are two.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agentos.store.writer import Writer

T = TypeVar("T")


class WriterStorage:
    """Opens and closes the file with its writer; the subclass names it (`Writer(...)`)."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def open(self) -> None:
        """Raises: StoreError: the file cannot be opened."""
        await self._writer.open()

    async def close(self) -> None:
        await self._writer.close()


def one_row(db: sqlite3.Connection, sql: str, params: Sequence[Any], convert: Callable[[Any], T]) -> T | None:
    """The first row `sql` selects, converted; None when it selects none."""
    row = db.execute(sql, params).fetchone()
    return None if row is None else convert(row)
