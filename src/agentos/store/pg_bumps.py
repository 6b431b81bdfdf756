"""Turn-epoch bumps in batches: every turn starting meanwhile shares one statement and one COMMIT.

Why: a bump is a write, so on its own each would be a transaction with its own WAL flush, and
at hundreds of turn starts a second those flushes queue up in front of every provider request
(measured: ~100 ms more time to first token at 200 concurrent turns). As with the writer
lanes, requests that arrive while a batch runs go together in the next one (group commit, no
linger): one `UPDATE ... FROM unnest(...)` for all of them.

A batch never holds one session twice: `TurnEpochs` chains the bumps of a session, so the next
starts only after the previous one's batch committed. The rows are locked in key order, so two
nodes' batches cannot deadlock on each other; a deadlock with a writer's batch (its share locks
are taken in write order) fails the statement with 40P01, and it runs again (bounded). Past the
bound the turns fail `store_unavailable` (503 with `Retry-After`), not `internal_error`: right
after PostgreSQL restarted, every node flushing its kept writes at once, 39 turn starts of the
chaos campaign met a deadlock three times running (agentos bench faults --cluster).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agentos.errors import StoreUnavailable

if TYPE_CHECKING:
    import asyncpg

Key = tuple[str, str]  # (tenant_id, session_id)
Row = tuple[int, str | None]  # the session's new epoch, the turn it fenced out (still running before)

DEADLOCK = "40P01"
ATTEMPTS = 3

# The old active turn is read under the row lock (FOR UPDATE, in key order); a turn that held the
# session and had stored no answer yet was still running: it is fenced out now and cannot record
# its own end any more, so its `turn.cancelled` is written here, in the same transaction as its
# successor's start. The durable event log keeps one terminal event per turn, in order.
BUMP_MANY = """
WITH req AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS r(tenant_id, session_id, turn_id)),
old AS (
    SELECT s.tenant_id, s.session_id, s.active_turn FROM sessions s
    JOIN req r ON s.tenant_id = r.tenant_id AND s.session_id = r.session_id
    ORDER BY s.tenant_id, s.session_id FOR UPDATE OF s
),
bumped AS (
    UPDATE sessions s SET turn_epoch = s.turn_epoch + 1, active_turn = r.turn_id
    FROM req r JOIN old o ON o.tenant_id = r.tenant_id AND o.session_id = r.session_id
    WHERE s.tenant_id = r.tenant_id AND s.session_id = r.session_id
    RETURNING s.tenant_id, s.session_id, s.turn_epoch, o.active_turn AS previous
),
running AS (
    SELECT * FROM bumped b WHERE b.previous IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = b.previous AND m.role = 'assistant')
),
ended AS (
    INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq)
    SELECT tenant_id, session_id, previous, 'turn.cancelled',
        jsonb_build_object('turn_id', previous, 'reason', 'superseded'),
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
        -- after every event of that turn stored so far: a follower resuming from any of them sees it
        (SELECT COALESCE(MAX(e.seq), 0) + 1 FROM events e
         WHERE e.tenant_id = running.tenant_id AND e.turn_id = running.previous)
    FROM running
)
SELECT b.tenant_id, b.session_id, b.turn_epoch, r.previous
FROM bumped b LEFT JOIN running r ON r.tenant_id = b.tenant_id AND r.session_id = b.session_id
"""


class BumpBatches:
    """`await submit(key, turn_id)`: the session's row after the bump, None if it has no row."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        *,
        acquire_timeout_s: float,
        timeout_s: float,
    ) -> None:
        # A connection of its own, not one of the pool's: a bump stands between every turn and its
        # provider request, and queued behind the pool's reads it cost 0.5 s of time to first
        # token at 1000 turns (bench/results, issue 9). One batch at a time needs only one.
        self._connect = connect
        self._conn: asyncpg.Connection | None = None
        self._acquire_timeout_s = acquire_timeout_s
        self._timeout_s = timeout_s
        self._pending: list[tuple[Key, str, asyncio.Future[Row | None]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, key: Key, turn_id: str) -> asyncio.Future[Row | None]:
        future: asyncio.Future[Row | None] = asyncio.get_running_loop().create_future()
        self._pending.append((key, turn_id, future))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="agentos-pg-bumps")
        return future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    rows = await self._run([key for key, _, _ in batch], [turn for _, turn, _ in batch])
                except Exception as exc:  # every bump of the batch failed alike
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for key, _, future in batch:
                    if not future.done():
                        future.set_result(rows.get(key))
        finally:
            self._task = None

    async def _run(self, keys: list[Key], turns: list[str]) -> dict[Key, Row]:
        tenants, sessions = [k[0] for k in keys], [k[1] for k in keys]
        for attempt in range(ATTEMPTS):
            conn = await self._connection()
            try:
                found: list[Any] = await conn.fetch(BUMP_MANY, tenants, sessions, turns, timeout=self._timeout_s)
                return {(t, s): (epoch, previous) for t, s, epoch, previous in found}
            except Exception as exc:
                if getattr(exc, "sqlstate", None) != DEADLOCK:
                    await self._drop()  # broken, or in an unknown state after a timeout: the next batch reconnects
                    raise
                if attempt == ATTEMPTS - 1:  # contention, not a bad statement: the client may try again
                    raise StoreUnavailable(f"postgres: turn epoch bumps deadlocked {ATTEMPTS} times running") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = None
            self._conn = await asyncio.wait_for(self._connect(), self._acquire_timeout_s)
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()  # no round trip: the connection may be the thing that is broken

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=self._timeout_s)
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except Exception:
                conn.terminate()
