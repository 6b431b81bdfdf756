"""The PostgreSQL store: sessions, transcripts, turn events and the access log in one database.

Theory of operation. `start()` applies the pending migrations (under an advisory lock, see
`agentos.store.pg_migrations`), opens a small asyncpg pool and starts four `PgWriter` lanes,
the same split as the SQLite store's four files:
- `messages`: sessions and transcripts, never shed; `create_session` and `commit_message` are
  acknowledged after COMMIT, `add_message` returns at once (callers await `wait_space()`);
- `events` and `access`: shed and counted over their bound, committed in batches. A turn's
  terminal event is never shed: a completed turn's is written on the `messages` lane by the
  statement that writes its answer (`commit_answer`, `pg_rows.MESSAGE_AND_EVENT`), so both
  commit together or not at all; a failed or cancelled turn's goes on the events lane's
  durable side;
- `ledger`: the usage ledger (`agentos.store.ledger`), one row per model call, never shed.
Many turns finishing together share one transaction per lane (group commit); nothing is a
per-token round trip.

Reads go straight to the pool after a `barrier()` on the lane they read, so a read sees every
write enqueued before it (as with SQLite's one ordered queue) while reads run in parallel.

A database that goes away: every call a request awaits is bounded and raises `StoreUnavailable`
(503 with Retry-After) when the database cannot be reached; `check()` answers `/readyz`
(`agentos.store.pg_health`). The pool reconnects by itself once the database is back.

Tenancy: every read and deletion filters on the caller's `tenant_id` in SQL, on indexes led by
`tenant_id` (migration 0001); another tenant's session answers exactly like a missing one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agentos.store import ledger, pg_pool
from agentos.store.base import StoreStatistics
from agentos.store.event_rows import EVENT_COLUMNS, event_from_row
from agentos.store.jsonl import JsonlLog
from agentos.store.ledger import UsageQuery, UsageRow, UsageTotal
from agentos.store.pg_fence import FENCED_INSERT_EVENT, FENCED_INSERT_MESSAGE, RUNNING, FencedTurns, TurnEpochs
from agentos.store.pg_health import HealthCheck, bounded_fetch, classify, outage_of, within
from agentos.store.pg_pool import pooled
from agentos.store.pg_rows import (
    DELETE_SESSION_ACCESS,
    EXPIRE_ACCESS,
    EXPIRE_USAGE,
    IDLE_SESSIONS,
    INSERT_ACCESS,
    INSERT_EVENT,
    INSERT_MESSAGE,
    INSERT_SESSION,
    TOKENS_SINCE,
    message_params,
)
from agentos.store.pg_writer import PgWriter
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord, access_params
from agentos.store.rows import MESSAGE_COLUMNS, SESSION_COLUMNS, idle_page, message_from_row, session_from_row

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

_WRITER_ACQUIRE_TIMEOUT_S = 30.0
_encode = msgspec.json.encode


class PostgresStore(FencedTurns):  # begin_turn, cancel_turn, end_turn: agentos.store.pg_fence
    def __init__(
        self, config: StoreConfig, *, jsonl_dir: str = "", on_batch: Callable[[int, float], None] | None = None
    ) -> None:
        self._config = config
        self._jsonl = JsonlLog(Path(jsonl_dir), queue_max_rows=config.queue_max_rows) if jsonl_dir else None
        self._on_batch = on_batch
        self._pool: asyncpg.Pool | None = None
        self._writers: tuple[PgWriter, PgWriter, PgWriter, PgWriter] | None = None
        self._unavailable: tuple[type[Exception], ...] = ()  # the driver's: known once started
        self._health = HealthCheck(config.postgres_acquire_timeout_s, outage_of(config.postgres_url))
        self._bound_s = config.postgres_request_timeout_s  # of every store call a request awaits
        self._epochs = TurnEpochs(
            config,
            lambda: self._db,
            self._settled,
            lambda: self._unavailable,
            lambda sql, p: self._lanes[1].put(sql, p),
        )

    async def start(self) -> None:
        """Migrate, open the pool, start the writers.

        Raises:
            ConfigError: naming store.postgres_url: unreachable, refused, or a schema mismatch
                (`MigrationError`); naming store.backend when asyncpg is not installed.
        """
        self._unavailable = pg_pool.connection_errors()
        await pg_pool.migrate(self._config)
        self._pool = await pg_pool.create_pool(self._config)
        c = self._config
        opts: dict[str, Any] = {
            # A writer is a background task: it may wait longer for a connection than a request
            # may, since its bounded queue meanwhile sheds events and holds back new messages.
            "acquire_timeout_s": max(c.postgres_acquire_timeout_s, _WRITER_ACQUIRE_TIMEOUT_S),
            "queue_max_rows": c.queue_max_rows,
            "batch_max_rows": c.batch_max_rows,
            "linger_ms": c.linger_ms,
            "fatal_errors": self._unavailable,
            "outage": outage_of(c.postgres_url),  # one log line each way for the node, not one per batch
        }
        self._writers = (
            PgWriter("messages", self._pool, retry_puts=True, **opts),  # a question is kept until stored
            PgWriter("events", self._pool, on_batch=self._on_batch, retry_puts=True, **opts),
            PgWriter("access", self._pool, **opts),
            PgWriter("ledger", self._pool, retry_puts=True, **opts),  # kept through an outage, like a question
        )
        for writer in self._writers:
            writer.start()
        if self._jsonl is not None:
            self._jsonl.start()

    async def close(self) -> None:
        if self._writers is not None:
            for writer in self._writers:
                await writer.close()
        await self._epochs.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._jsonl is not None:
            await self._jsonl.close()

    @property
    def _lanes(self) -> tuple[PgWriter, PgWriter, PgWriter, PgWriter]:
        assert self._writers is not None, "store not started"
        return self._writers

    @property
    def _db(self) -> asyncpg.Pool:
        assert self._pool is not None, "store not started"
        return self._pool

    async def _fetch(self, lane: PgWriter, sql: str, *args: Any) -> list[Any]:
        """Rows of a read that sees every write queued on `lane` before it.

        Raises:
            StoreUnavailable: the database cannot be reached, or the barrier, the connection or
                the query took longer than its bound.
            StoreError: the database failed otherwise.
        """
        await within(lane.barrier(), "waiting for earlier writes", self._bound_s)
        return await bounded_fetch(self._db, self._config, self._unavailable, "read", sql, *args)

    async def check(self) -> None:
        """Raises: StoreUnavailable: the database does not answer `SELECT 1` (cached ~1 s)."""
        for writer in self._lanes:
            writer.check()
        await self._health.check(self._db)

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(self, r: SessionRecord) -> None:
        params = (r.session_id, r.tenant_id, r.agent, _encode(r.metadata).decode(), r.created_at_ms, r.on_busy, r.owner)
        await within(self._lanes[0].submit(INSERT_SESSION, params), "creating a session", self._bound_s)

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = $1 AND tenant_id = $2"
        rows = await self._fetch(self._lanes[0], sql, session_id, tenant_id)
        return session_from_row(rows[0]) if rows else None

    async def list_sessions(
        self, tenant_id: str, *, limit: int, after: str | None, agent: str | None = None, owner: str | None = None
    ) -> list[SessionRecord]:
        sql = (
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = $1 AND session_id > $2"
            " AND ($4::text IS NULL OR agent = $4) AND ($5::text IS NULL OR owner = $5) ORDER BY session_id LIMIT $3"
        )
        rows = await self._fetch(self._lanes[0], sql, tenant_id, after or "", limit, agent, owner)
        return [session_from_row(row) for row in rows]

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Delete the tenant's session, its transcript, its events and its access rows (their
        paths name it) in one transaction, after every write of theirs queued before the call.

        Raises:
            StoreError: the database failed; the transaction rolled back, nothing is deleted
                (`StoreUnavailable` when it cannot be reached or a bound passed).
        """
        messages, events, access, _ = self._lanes
        await within(messages.barrier(), "waiting for earlier writes", self._bound_s)
        await within(events.barrier(), "waiting for earlier events", self._bound_s)
        await within(access.barrier(), "waiting for earlier access rows", self._bound_s)
        key = (tenant_id, session_id)
        try:
            async with pooled(self._db, self._config.postgres_acquire_timeout_s) as conn, conn.transaction():
                gone = await conn.execute(
                    "DELETE FROM sessions WHERE tenant_id = $1 AND session_id = $2", *key, timeout=self._bound_s
                )
                if gone == "DELETE 0":
                    return False  # unknown, or another tenant's: nothing of it is touched
                await conn.execute(
                    "DELETE FROM messages WHERE tenant_id = $1 AND session_id = $2", *key, timeout=self._bound_s
                )
                await conn.execute(
                    "DELETE FROM events WHERE tenant_id = $1 AND session_id = $2", *key, timeout=self._bound_s
                )
                await conn.execute(DELETE_SESSION_ACCESS, *access_params(*key), timeout=self._bound_s)
        except Exception as exc:
            raise classify(exc, self._unavailable, "delete (nothing was deleted)") from exc
        if self._jsonl is not None:
            await self._jsonl.delete_session(session_id)
        return True

    async def session_counts(self) -> dict[str, int]:
        rows = await self._fetch(self._lanes[0], "SELECT tenant_id, COUNT(*) FROM sessions GROUP BY tenant_id")
        return {tenant: int(count) for tenant, count in rows}

    async def token_usage_since(self, since_ms: int) -> dict[str, int]:
        return {tenant: int(tokens) for tenant, tokens in await self._fetch(self._lanes[0], TOKENS_SINCE, since_ms)}

    def forget_session(self, session_id: str) -> None:
        """Nothing to do: the session's state stays in the database when it leaves memory."""

    async def idle_sessions(
        self, tenant_id: str, before_ms: int, *, after: str, limit: int
    ) -> tuple[list[str], str | None]:
        return idle_page(await self._fetch(self._lanes[0], IDLE_SESSIONS, tenant_id, before_ms, after, limit), limit)

    async def expire_access(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        return int((await self._fetch(self._lanes[2], EXPIRE_ACCESS, tenant_id, before_ms, limit))[0][0])

    async def expire_usage(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        return int((await self._fetch(self._lanes[3], EXPIRE_USAGE, tenant_id, before_ms, limit))[0][0])

    async def _settled(self) -> None:  # every message and event queued so far is committed
        await asyncio.gather(self._lanes[0].barrier(), self._lanes[1].barrier())

    # -- messages ------------------------------------------------------------------------------

    async def wait_space(self) -> None:
        await within(self._lanes[0].wait_space(), "waiting for room in the message queue", self._bound_s)

    def add_message(self, record: MessageRecord) -> None:
        self._lanes[0].put(
            *self._epochs.route(record.turn_id, INSERT_MESSAGE, FENCED_INSERT_MESSAGE, message_params(record))
        )

    async def commit_message(self, record: MessageRecord) -> None:
        op = self._epochs.route(record.turn_id, INSERT_MESSAGE, FENCED_INSERT_MESSAGE, message_params(record))
        await within(self._lanes[0].submit(*op), "committing a message", self._bound_s)

    async def running_turn(self, tenant_id: str, session_id: str) -> str | None:
        # behind the events' lane too: a turn that ended with no answer lets go of its session there
        await within(self._lanes[1].barrier(), "waiting for earlier writes", self._bound_s)
        rows = await self._fetch(self._lanes[0], RUNNING, tenant_id, session_id)
        return str(rows[0][0]) if rows else None

    async def delete_turn_messages(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        # On the lane its messages were put on (ordered after them), and not fenced: the turn
        # that rolls another back deletes the older turn's rows, whatever its epoch. A turn that
        # completed (another node's, which finished before the rollback's bump) keeps them.
        sql = (
            "DELETE FROM messages WHERE tenant_id = $1 AND session_id = $2 AND turn_id = $3 AND NOT EXISTS"
            " (SELECT 1 FROM messages m WHERE m.turn_id = $3 AND m.role = 'assistant' AND m.status = 'completed')"
        )
        await within(self._lanes[0].submit(sql, (tenant_id, session_id, turn_id)), "deleting a turn", self._bound_s)

    async def history(self, tenant_id: str, session_id: str, *, limit: int) -> list[MessageRecord]:
        sql = (
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant_id = $1 AND session_id = $2"
            " ORDER BY message_id DESC LIMIT $3"
        )
        rows = await self._fetch(self._lanes[0], sql, tenant_id, session_id, limit)
        return [message_from_row(row) for row in reversed(rows)]

    async def list_messages(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[MessageRecord]:
        sql = (
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant_id = $1 AND session_id = $2 AND message_id > $3"
            " ORDER BY message_id LIMIT $4"
        )
        return [
            message_from_row(row) for row in await self._fetch(self._lanes[0], sql, tenant_id, session_id, after, limit)
        ]

    # -- events and access log -------------------------------------------------------------------

    async def commit_answer(self, answer: MessageRecord, event: EventRecord) -> None:
        params = message_params(answer, event)  # one statement stores both (pg_rows.MESSAGE_AND_EVENT)
        op = self._epochs.route(answer.turn_id, INSERT_MESSAGE, FENCED_INSERT_MESSAGE, params)
        if self._jsonl is not None:
            self._jsonl.write(event)
        await within(self._lanes[0].submit(*op), "committing an answer", self._bound_s)

    def add_event(self, r: EventRecord, *, durable: bool = False) -> None:
        self._lanes[1].put(*self._event(r), sheddable=not durable)
        if self._jsonl is not None:
            self._jsonl.write(r)

    def _event(self, r: EventRecord) -> tuple[str, tuple[Any, ...]]:
        params = (r.tenant_id, r.session_id, r.turn_id, r.type, _encode(r.data).decode(), r.created_at_ms, r.seq)
        return self._epochs.route(r.turn_id, INSERT_EVENT, FENCED_INSERT_EVENT, params)

    async def list_events(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[EventRecord]:
        where = "tenant_id = $1 AND session_id = $2 AND event_id > $3 ORDER BY event_id LIMIT $4"
        return await self._events(where, tenant_id, session_id, after, limit)

    async def list_turn_events(
        self, tenant_id: str, session_id: str, turn_id: str, *, after_seq: int, limit: int
    ) -> list[EventRecord]:
        where = "tenant_id = $1 AND turn_id = $2 AND session_id = $3 AND seq > $4 ORDER BY seq LIMIT $5"
        return await self._events(where, tenant_id, turn_id, session_id, after_seq, limit)

    async def _events(self, where: str, *args: Any) -> list[EventRecord]:
        # Completed turns' terminal events are queued on the messages lane (`commit_answer`).
        await within(self._lanes[0].barrier(), "waiting for earlier writes", self._bound_s)
        rows = await self._fetch(self._lanes[1], f"SELECT {EVENT_COLUMNS} FROM events WHERE {where}", *args)
        return [event_from_row(row) for row in rows]

    def log_access(self, r: AccessRecord) -> None:
        self._lanes[2].put(INSERT_ACCESS, r.params(), sheddable=True)

    # -- the usage ledger ----------------------------------------------------------------------

    def record_usage(self, row: UsageRow) -> None:
        self._lanes[3].put(ledger.INSERT_PG, row.params())

    async def usage_totals(self, query: UsageQuery) -> list[UsageTotal]:
        sql, params = ledger.select_totals(query, lambda n: f"${n}")
        return ledger.totals_from_rows(query, await self._fetch(self._lanes[3], sql, *params))

    def statistics(self) -> StoreStatistics:
        if self._writers is None:
            return StoreStatistics(0, 0, 0, 0, 0)
        m, e, a, ledger = (w.statistics() for w in self._writers)
        jsonl_dropped = self._jsonl.dropped_total if self._jsonl is not None else 0
        stale = sum(w.stale_total for w in self._writers)  # the turn fence's refusals
        dropped = e.dropped_total + jsonl_dropped
        return StoreStatistics(m.queued, e.queued, a.queued, dropped, a.dropped_total, stale, ledger.queued)
