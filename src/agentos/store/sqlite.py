"""The embedded store: three SQLite files in WAL mode, each with its own writer thread.

`sessions.db` holds sessions and transcripts (never shed), `events.db` the turn events and
`access.db` the access log (both shed under overload, counted). Separate files keep the
sheddable writers from holding the transcript writer's lock. A turn's terminal event is never
shed, and a completed turn's is committed with its answer in sessions.db before it is copied
to events.db (`agentos.store.sqlite_turn_ends`): a crash cannot lose it once acknowledged.

Tenancy: every read and deletion filters on the caller's `tenant_id` in its WHERE clause, and
the indexes those queries use are led by `tenant_id`, so another tenant's rows are never even
visited. The schema script replaces the session-led indexes of older files (a migration that
runs when a file is opened: CREATE INDEX IF NOT EXISTS, DROP INDEX IF EXISTS).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agentos.config import StoreConfig
from agentos.store import sqlite_turn_ends as turn_ends
from agentos.store import usage
from agentos.store.base import OneNodeTurns, StoreStatistics
from agentos.store.event_rows import EVENT_COLUMNS, event_from_row, migrate_sqlite_events
from agentos.store.jsonl import JsonlLog
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord
from agentos.store.sqlite_rows import (
    ACCESS_SCHEMA,
    EVENTS_SCHEMA,
    INSERT_ACCESS,
    INSERT_MESSAGE,
    INSERT_SESSION,
    MESSAGE_COLUMNS,
    SESSIONS_SCHEMA,
    message_from_row,
    message_params,
    migrate_access,
    session_from_row,
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
        sessions_schema = SESSIONS_SCHEMA + turn_ends.SCHEMA
        self._sessions = Writer("messages", data_dir / "sessions.db", sessions_schema, retry_puts=True, **opts)
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
        self._ends = turn_ends.TurnEnds(self._sessions, self._events)
        self._jsonl = JsonlLog(Path(jsonl_dir), queue_max_rows=config.queue_max_rows) if jsonl_dir else None

    async def start(self) -> None:
        for writer in (self._sessions, self._events, self._access):
            writer.start()
        if self._jsonl is not None:
            self._jsonl.start()
        if recovered := await self._ends.recover():
            log.warning("events.db: %d terminal events of acknowledged turns were lost and written again", recovered)

    async def check(self) -> None:
        """Raises: StoreUnavailable: a writer is closed or its thread died."""
        for writer in (self._sessions, self._events, self._access):
            writer.check()

    async def close(self) -> None:
        for writer in (self._sessions, self._events, self._access):
            await writer.close()
        if self._jsonl is not None:
            await self._jsonl.close()

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(self, r: SessionRecord) -> None:
        params = (r.session_id, r.tenant_id, r.agent, _encode(r.metadata).decode(), r.created_at_ms)
        await self._sessions.submit(INSERT_SESSION, params)

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        def read(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute(
                "SELECT * FROM sessions WHERE session_id = ? AND tenant_id = ?", (session_id, tenant_id)
            ).fetchone()
            return session_from_row(row) if row else None

        result: SessionRecord | None = await self._sessions.read(read)
        return result

    async def list_sessions(
        self, tenant_id: str, *, limit: int, after: str | None, agent: str | None = None
    ) -> list[SessionRecord]:
        def read(conn: sqlite3.Connection) -> list[SessionRecord]:
            rows = conn.execute(
                "SELECT * FROM sessions WHERE tenant_id = ? AND session_id > ? AND (? IS NULL OR agent = ?)"
                " ORDER BY session_id LIMIT ?",
                (tenant_id, after or "", agent, agent, limit),
            ).fetchall()
            return [session_from_row(row) for row in rows]

        result: list[SessionRecord] = await self._sessions.read(read)
        return result

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Delete the tenant's session with its transcript, its events and its JSONL lines.

        Each deletion goes through the queue of the file it cleans, so it is ordered after
        every write of the session queued before it. The session row goes last: if the
        process dies half-way, the session still exists and deleting it again finishes.

        Raises:
            StoreError: a database or the JSONL log failed; the session may be half deleted.
        """

        key = (tenant_id, session_id)

        def delete_transcript(conn: sqlite3.Connection) -> bool:
            owned = "SELECT 1 FROM sessions WHERE tenant_id = ? AND session_id = ?"
            if conn.execute(owned, key).fetchone() is None:
                return False  # unknown, or another tenant's: nothing of it is touched
            conn.execute("DELETE FROM messages WHERE tenant_id = ? AND session_id = ?", key)
            conn.execute("DELETE FROM turn_ends WHERE tenant_id = ? AND session_id = ?", key)
            return True

        if not await self._sessions.submit(apply=delete_transcript):
            return False
        cascade = [self._events.submit("DELETE FROM events WHERE tenant_id = ? AND session_id = ?", key)]
        if self._jsonl is not None:
            cascade.append(asyncio.ensure_future(self._jsonl.delete_session(session_id)))
        await asyncio.gather(*cascade)
        gone: int = await self._sessions.submit("DELETE FROM sessions WHERE tenant_id = ? AND session_id = ?", key)
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
        await self._ends.commit(INSERT_MESSAGE, message_params(answer), event)  # see sqlite_turn_ends
        if self._jsonl is not None:
            self._jsonl.write(event)

    def add_event(self, r: EventRecord, *, durable: bool = False) -> None:
        self._events.put(turn_ends.INSERT_EVENT, turn_ends.event_params(r), sheddable=not durable)
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
        params = (r.tenant_id, r.ts_ms, r.method, r.path, r.status, r.duration_ms, r.remote, r.key_id)
        self._access.put(INSERT_ACCESS, params, sheddable=True)

    def statistics(self) -> StoreStatistics:
        m, e, a = (w.statistics() for w in (self._sessions, self._events, self._access))
        jsonl_dropped = self._jsonl.dropped_total if self._jsonl is not None else 0
        return StoreStatistics(
            message_queue=m.queued,
            event_queue=e.queued,
            access_queue=a.queued,
            events_dropped_total=e.dropped_total + jsonl_dropped,
            access_dropped_total=a.dropped_total,
        )
