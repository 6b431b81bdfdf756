"""A completed turn's `turn.completed`, kept with its answer in sessions.db until events.db has it.

The SQLite store keeps transcripts and events in two files, each with its own writer, so no
transaction holds both the answer and its terminal event. Theory of operation:

- `commit_answer` writes the answer and a copy of the event (a `turn_ends` row) in ONE
  operation of the sessions writer: the transaction the answer was committed in anyway, one
  more row, no extra transaction, and the turn is acknowledged after that commit alone (as
  before: it does not wait for the events writer);
- once that commit is done, the event is queued on the events writer's durable side (never
  shed), so events.db never has a terminal event whose answer is not committed;
- every `PRUNE_EVERY` answers, a barrier on the events writer is followed by deleting the
  copies whose events are committed there: the table holds about that many rows;
- at start-up (`recover`), copies left by a crash are written into events.db where the event is
  missing, then deleted. A crash after the client was told loses neither the answer nor its event.

Usage: `ends = TurnEnds(sessions, events)`; `await ends.recover()` after both writers started;
`await ends.commit(message_sql, message_params, event)`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from contextlib import suppress
from functools import partial
from typing import Any

import msgspec

from agentos.errors import StoreError
from agentos.store.records import EventRecord
from agentos.store.writer import Writer

PRUNE_EVERY = 512

SCHEMA = """
CREATE TABLE IF NOT EXISTS turn_ends (
    n INTEGER PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL
);
"""
INSERT_EVENT = (
    "INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_END = "INSERT OR REPLACE INTO turn_ends VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_ENDS = "SELECT n, tenant_id, session_id, turn_id, type, data, created_at_ms, seq FROM turn_ends ORDER BY n"
_STORED = "SELECT 1 FROM events WHERE tenant_id = ? AND turn_id = ? AND seq = ? AND type = ? AND session_id = ?"

_encode = msgspec.json.encode


def event_params(r: EventRecord) -> tuple[Any, ...]:
    """`INSERT_EVENT`'s parameters."""
    return (r.tenant_id, r.session_id, r.turn_id, r.type, _encode(r.data).decode(), r.created_at_ms, r.seq)


class TurnEnds:
    def __init__(self, sessions: Writer, events: Writer) -> None:
        self._sessions = sessions
        self._events = events
        self._last = 0  # the `n` of the latest copy

    async def recover(self) -> int:
        """Write into events.db the terminal events a crash kept only in sessions.db; how many.

        Raises: StoreError: a database failed (the copies stay for the next start).
        """
        ends: list[tuple[Any, ...]] = await self._sessions.submit(apply=lambda conn: conn.execute(_ENDS).fetchall())
        if not ends:
            return 0
        written: int = await self._events.submit(apply=partial(_write_missing, ends))
        self._last = ends[-1][0]
        await self._sessions.submit("DELETE FROM turn_ends WHERE n <= ?", (self._last,))
        return written

    async def commit(self, message_sql: str, message_params: Sequence[Any], event: EventRecord) -> None:
        """Commit an answer with a copy of its terminal event, then queue the event itself.

        Raises: StoreError, StoreUnavailable: the answer was not committed (nor the event).
        """
        self._last += 1
        end = (self._last, *event_params(event))

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(message_sql, message_params)
            conn.execute(_INSERT_END, end)

        committed: asyncio.Future[None] = self._sessions.submit(apply=write)
        # On the commit's own future, so that a caller cancelled meanwhile does not skip it.
        committed.add_done_callback(partial(self._committed, end))
        await asyncio.shield(committed)

    def _committed(self, end: tuple[Any, ...], committed: asyncio.Future[None]) -> None:
        if committed.cancelled() or committed.exception() is not None:
            return  # not committed: neither is its copy
        with suppress(StoreError):  # closing: the copy stays, and `recover` writes it at the next start
            self._events.put(INSERT_EVENT, end[1:])
            if end[0] % PRUNE_EVERY == 0:
                self._events.submit(apply=_nothing).add_done_callback(partial(self._prune, end[0]))

    def _prune(self, upto: int, barrier: asyncio.Future[None]) -> None:
        """Every event queued before the barrier is committed: their copies can go."""
        if barrier.cancelled() or barrier.exception() is not None:
            return
        with suppress(StoreError):
            self._sessions.put("DELETE FROM turn_ends WHERE n <= ?", (upto,))


def _nothing(conn: sqlite3.Connection) -> None:
    return None


def _write_missing(ends: list[tuple[Any, ...]], conn: sqlite3.Connection) -> int:
    written = 0
    for _n, tenant, session, turn, kind, data, created, seq in ends:
        if conn.execute(_STORED, (tenant, turn, seq, kind, session)).fetchone() is None:
            conn.execute(INSERT_EVENT, (tenant, session, turn, kind, data, created, seq))
            written += 1
    return written
