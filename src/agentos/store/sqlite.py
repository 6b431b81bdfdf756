"""The embedded store: three SQLite files in WAL mode, each with its own writer thread.

`sessions.db` holds sessions and transcripts (never shed), `events.db` the turn events and
`access.db` the access log (both shed under overload, counted), `ledger.db` the usage ledger
(never shed; `agentos.store.ledger`). Separate files keep the sheddable writers from holding
the transcript writer's lock. A turn's terminal event is never
shed, and a completed turn's is committed with its answer in sessions.db before it is copied
to events.db (`agentos.store.sqlite`): a crash cannot lose it once acknowledged.

Tenancy: every read and deletion filters on the caller's `tenant_id` in its WHERE clause, and
the indexes those queries use are led by `tenant_id`, so another tenant's rows are never even
visited. The schema script replaces the session-led indexes of older files (a migration that
runs when a file is opened: CREATE INDEX IF NOT EXISTS, DROP INDEX IF EXISTS).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from agentos.config import StoreConfig
from agentos.errors import StoreError
from agentos.store import ledger, usage
from agentos.store.base import OneNodeTurns, StoreStatistics
from agentos.store.event_rows import EVENT_COLUMNS, event_from_row, migrate_sqlite_events
from agentos.store.jsonl import JsonlLog
from agentos.store.ledger import UsageQuery, UsageRow, UsageTotal
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord, access_params
from agentos.store.rows import (
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    idle_page,
    message_from_row,
    message_params,
    session_from_row,
)
from agentos.store.sqlite_rows import (
    ACCESS_SCHEMA,
    DELETE_BATCH_ROWS,
    DELETE_SESSION,
    DELETE_SESSION_ACCESS,
    DELETE_SESSION_EVENTS,
    DELETE_SESSION_EVENTS_BATCH,
    DELETE_SESSION_MESSAGES_BATCH,
    EVENTS_SCHEMA,
    EXPIRE_ACCESS,
    EXPIRE_USAGE,
    IDLE_SESSIONS,
    INSERT_ACCESS,
    INSERT_MESSAGE,
    INSERT_SESSION,
    SESSIONS_SCHEMA,
    migrate_access,
    migrate_sessions,
)
from agentos.store.writer import Writer

_encode = msgspec.json.encode
log = logging.getLogger("agentos.store")


class SQLiteStore(OneNodeTurns):
    def __init__(
        self,
        data_dir: Path,
        config: StoreConfig,
        *,
        jsonl_dir: str = "",
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        opts: dict[str, Any] = {
            "synchronous": config.synchronous,
            "queue_max_rows": config.queue_max_rows,
            "batch_max_rows": config.batch_max_rows,
            "busy_timeout_ms": config.busy_timeout_ms,
            "linger_ms": config.linger_ms,
            "put_linger_ms": config.put_linger_ms,
        }
        # A question (a put) kept until stored when the disk fails its batch (store/sqlite_outage.py)
        sessions_schema = SESSIONS_SCHEMA + TURN_ENDS_SCHEMA
        self._sessions = Writer(
            "messages", data_dir / "sessions.db", sessions_schema, migrate=migrate_sessions, retry_puts=True, **opts
        )
        self._events = Writer(
            "events",
            data_dir / "events.db",
            EVENTS_SCHEMA,
            on_batch=on_batch,
            migrate=migrate_sqlite_events,
            retry_puts=True,
            **opts,
        )
        self._access = Writer("access", data_dir / "access.db", ACCESS_SCHEMA, migrate=migrate_access, **opts)
        # Its own file and thread: a month's totals summed for /v1/usage never hold up a transcript.
        self._ledger = Writer("ledger", data_dir / "ledger.db", ledger.sqlite_schema(), retry_puts=True, **opts)
        self._ends = TurnEnds(self._sessions, self._events)
        self._jsonl = JsonlLog(Path(jsonl_dir), queue_max_rows=config.queue_max_rows) if jsonl_dir else None

    @property
    def _writers(self) -> tuple[Writer, ...]:
        return (self._sessions, self._events, self._access, self._ledger)

    async def start(self) -> None:
        for writer in self._writers:
            writer.start()
        if self._jsonl is not None:
            self._jsonl.start()
        if recovered := await self._ends.recover():
            log.warning("events.db: %d terminal events of acknowledged turns were lost and written again", recovered)

    async def check(self) -> None:
        """Raises: StoreUnavailable: a writer is closed or its thread died."""
        for writer in self._writers:
            writer.check()

    async def close(self) -> None:
        for writer in self._writers:
            await writer.close()
        if self._jsonl is not None:
            await self._jsonl.close()

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(self, r: SessionRecord) -> None:
        params = (r.session_id, r.tenant_id, r.agent, _encode(r.metadata).decode(), r.created_at_ms, r.on_busy, r.owner)
        await self._sessions.submit(INSERT_SESSION, params)

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        def read(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ? AND tenant_id = ?",
                (session_id, tenant_id),
            ).fetchone()
            return session_from_row(row) if row else None

        result: SessionRecord | None = await self._sessions.read(read)
        return result

    async def list_sessions(
        self, tenant_id: str, *, limit: int, after: str | None, agent: str | None = None, owner: str | None = None
    ) -> list[SessionRecord]:
        def read(conn: sqlite3.Connection) -> list[SessionRecord]:
            rows = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? AND session_id > ?"
                " AND (? IS NULL OR agent = ?) AND (? IS NULL OR owner = ?) ORDER BY session_id LIMIT ?",
                (tenant_id, after or "", agent, agent, owner, owner, limit),
            ).fetchall()
            return [session_from_row(row) for row in rows]

        result: list[SessionRecord] = await self._sessions.read(read)
        return result

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Delete the tenant's session with its transcript, its events and its JSONL lines.

        Each deletion goes through the queue of the file it cleans, so it is ordered after
        every write of the session queued before it. Messages and events go `DELETE_BATCH_ROWS`
        per transaction: a long session's deletion never holds a writer (and the turns queued
        behind it) for long. The session row goes last: if the process dies half-way, the
        session still exists and deleting it again finishes.

        Raises:
            StoreError: a database or the JSONL log failed; the session may be half deleted.
        """

        key = (tenant_id, session_id)

        def delete_transcript(conn: sqlite3.Connection) -> bool:
            owned = "SELECT 1 FROM sessions WHERE tenant_id = ? AND session_id = ?"
            if conn.execute(owned, key).fetchone() is None:
                return False  # unknown, or another tenant's: nothing of it is touched
            conn.execute("DELETE FROM turn_ends WHERE tenant_id = ? AND session_id = ?", key)
            return True

        if not await self._sessions.submit(apply=delete_transcript):
            return False
        await _in_batches(self._sessions, DELETE_SESSION_MESSAGES_BATCH, key)
        cascade = [
            _in_batches(self._events, DELETE_SESSION_EVENTS_BATCH, key, wipe=DELETE_SESSION_EVENTS),
            self._access.submit(apply=_wiping(self._access, DELETE_SESSION_ACCESS, access_params(*key))),
        ]
        if self._jsonl is not None:
            cascade.append(asyncio.ensure_future(self._jsonl.delete_session(session_id)))
        await asyncio.gather(*cascade)
        gone: int = await self._sessions.submit(apply=_wiping(self._sessions, DELETE_SESSION, key))
        return gone > 0

    async def session_counts(self) -> dict[str, int]:
        counts: dict[str, int] = await self._sessions.submit(apply=usage.session_counts)
        return counts

    async def token_usage_since(self, since_ms: int) -> dict[str, int]:
        tokens: dict[str, int] = await self._sessions.submit(apply=usage.tokens_since(since_ms))
        return tokens

    def forget_session(self, session_id: str) -> None:
        """Nothing to do: the session's state stays on disk when it leaves memory."""

    # -- messages ------------------------------------------------------------------------------

    async def wait_space(self) -> None:
        await self._sessions.wait_space()

    def add_message(self, record: MessageRecord) -> None:
        self._sessions.put(INSERT_MESSAGE, message_params(record))

    async def commit_message(self, record: MessageRecord) -> None:
        await self._sessions.submit(INSERT_MESSAGE, message_params(record))

    async def delete_turn_messages(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        # Through the queue its messages were put on: ordered after them. A turn that completed
        # after all (its answer was committing when it was replaced) keeps them.
        sql = (
            "DELETE FROM messages WHERE tenant_id = ? AND session_id = ? AND turn_id = ? AND NOT EXISTS"
            " (SELECT 1 FROM messages m WHERE m.turn_id = ? AND m.role = 'assistant' AND m.status = 'completed')"
        )
        await self._sessions.submit(sql, (tenant_id, session_id, turn_id, turn_id))

    async def history(self, tenant_id: str, session_id: str, *, limit: int) -> list[MessageRecord]:
        def read(conn: sqlite3.Connection) -> list[MessageRecord]:
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant_id = ? AND session_id = ?"
                " ORDER BY message_id DESC LIMIT ?",
                (tenant_id, session_id, limit),
            ).fetchall()
            return [message_from_row(row) for row in reversed(rows)]

        result: list[MessageRecord] = await self._sessions.read(read)
        return result

    async def list_messages(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[MessageRecord]:
        def read(conn: sqlite3.Connection) -> list[MessageRecord]:
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant_id = ? AND session_id = ? AND message_id > ? "
                "ORDER BY message_id LIMIT ?",
                (tenant_id, session_id, after, limit),
            ).fetchall()
            return [message_from_row(row) for row in rows]

        result: list[MessageRecord] = await self._sessions.read(read)
        return result

    # -- events and access log -------------------------------------------------------------------

    async def commit_answer(self, answer: MessageRecord, event: EventRecord) -> None:
        await self._ends.commit(INSERT_MESSAGE, message_params(answer), event)  # see TurnEnds
        if self._jsonl is not None:
            self._jsonl.write(event)

    def add_event(self, r: EventRecord, *, durable: bool = False) -> None:
        self._events.put(INSERT_EVENT, event_params(r), sheddable=not durable)
        if self._jsonl is not None:
            self._jsonl.write(r)

    async def list_events(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[EventRecord]:
        where = "tenant_id = ? AND session_id = ? AND event_id > ? ORDER BY event_id"
        return await self._read_events(where, (tenant_id, session_id, after, limit))

    async def list_turn_events(
        self, tenant_id: str, session_id: str, turn_id: str, *, after_seq: int, limit: int
    ) -> list[EventRecord]:
        where = "tenant_id = ? AND turn_id = ? AND session_id = ? AND seq > ? ORDER BY seq"
        return await self._read_events(where, (tenant_id, turn_id, session_id, after_seq, limit))

    async def _read_events(self, where: str, params: tuple[Any, ...]) -> list[EventRecord]:
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {where} LIMIT ?"
        rows = await self._events.read(lambda conn: conn.execute(sql, params).fetchall())
        return [event_from_row(row) for row in rows]

    def log_access(self, r: AccessRecord) -> None:
        self._access.put(INSERT_ACCESS, r.params(), sheddable=True)

    # -- retention -----------------------------------------------------------------------------

    async def idle_sessions(
        self, tenant_id: str, before_ms: int, *, after: str, limit: int
    ) -> tuple[list[str], str | None]:
        params = (tenant_id, before_ms, after, limit)
        rows = await self._sessions.read(lambda conn: conn.execute(IDLE_SESSIONS, params).fetchall())
        return idle_page(rows, limit)

    async def expire_access(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        deleted: int = await self._access.submit(EXPIRE_ACCESS, (tenant_id, before_ms, limit))
        return deleted

    async def expire_usage(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        deleted: int = await self._ledger.submit(EXPIRE_USAGE, (tenant_id, before_ms, limit))
        return deleted

    # -- the usage ledger ----------------------------------------------------------------------

    def record_usage(self, row: UsageRow) -> None:
        self._ledger.put(ledger.INSERT_SQLITE, row.params())

    async def usage_totals(self, query: UsageQuery) -> list[UsageTotal]:
        sql, params = ledger.select_totals(query, lambda n: "?")
        rows = await self._ledger.read(lambda conn: conn.execute(sql, params).fetchall())
        return ledger.totals_from_rows(query, rows)

    def statistics(self) -> StoreStatistics:
        m, e, a = (w.statistics() for w in (self._sessions, self._events, self._access))
        jsonl_dropped = self._jsonl.dropped_total if self._jsonl is not None else 0
        return StoreStatistics(
            message_queue=m.queued,
            event_queue=e.queued,
            access_queue=a.queued,
            events_dropped_total=e.dropped_total + jsonl_dropped,
            access_dropped_total=a.dropped_total,
            ledger_queue=self._ledger.statistics().queued,
        )


# -- A completed turn's `turn.completed`, kept with its answer in sessions.db until events.db has it ----
#
# The SQLite store keeps transcripts and events in two files, each with its own writer, so no
# transaction holds both the answer and its terminal event. Theory of operation:
#
# - `commit_answer` writes the answer and a copy of the event (a `turn_ends` row) in ONE
# operation of the sessions writer: the transaction the answer was committed in anyway, one
# more row, no extra transaction, and the turn is acknowledged after that commit alone (as
# before: it does not wait for the events writer);
# - once that commit is done, the event is queued on the events writer's durable side (never
# shed), so events.db never has a terminal event whose answer is not committed;
# - every `PRUNE_EVERY` answers, a barrier on the events writer is followed by deleting the
# copies whose events are committed there: the table holds about that many rows;
# - at start-up (`recover`), copies left by a crash are written into events.db where the event is
# missing, then deleted. A crash after the client was told loses neither the answer nor its event.
#
# Usage: `ends = TurnEnds(sessions, events)`; `await ends.recover()` after both writers started;
# `await ends.commit(message_sql, message_params, event)`.


PRUNE_EVERY = 512

TURN_ENDS_SCHEMA = """
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


async def _in_batches(writer: Writer, sql: str, key: tuple[str, str], *, wipe: str = "") -> None:
    """Run `sql` (a deletion of at most its last parameter's rows) until it deletes less than a
    batch, each in a transaction of its own; then `wipe` (the whole deletion) with the WAL truncated."""
    while await writer.submit(sql, (*key, DELETE_BATCH_ROWS)) == DELETE_BATCH_ROWS:
        pass
    if wipe:
        await writer.submit(apply=_wiping(writer, wipe, key))


def _wiping(writer: Writer, sql: str, params: Sequence[Any]) -> Callable[[sqlite3.Connection], int]:
    """An apply that runs a deletion and has the writer truncate its WAL once it is committed:
    with `secure_delete` (`agentos.store.ops.connect`) no copy of the rows stays readable."""

    def apply(conn: sqlite3.Connection) -> int:
        writer.truncate_wal_after_commit()
        return conn.execute(sql, params).rowcount

    return apply


def _nothing(conn: sqlite3.Connection) -> None:
    return None


def _write_missing(ends: list[tuple[Any, ...]], conn: sqlite3.Connection) -> int:
    written = 0
    for _n, tenant, session, turn, kind, data, created, seq in ends:
        if conn.execute(_STORED, (tenant, turn, seq, kind, session)).fetchone() is None:
            conn.execute(INSERT_EVENT, (tenant, session, turn, kind, data, created, seq))
            written += 1
    return written
