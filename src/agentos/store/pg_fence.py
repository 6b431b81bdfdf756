"""Turn epochs on PostgreSQL: last-wins across nodes, kept by the database (a fencing token).

Theory of operation. Every session row has a `turn_epoch` (migration 0004). A turn, on
whichever node, starts with one round trip, `begin()`:

    UPDATE sessions SET turn_epoch = turn_epoch + 1, active_turn = $turn ... RETURNING turn_epoch

so of two turns of one session the later UPDATE wins, whatever node each runs on. The turn
keeps the epoch it got; every message and event it writes afterwards goes through
`agentos_turn_fence(tenant, session, epoch)`, which raises SQLSTATE `AOS01` unless the
session is still at that epoch (taking a share lock on the session row, so a write commits
either before the next bump or not at all). The writer turns that error into `StaleTurn` for
the one write (`agentos.store.pg_writer`): a superseded turn that never heard of its
successor (the cancel message lost, Redis down, a pause) cannot write after its successor
started. The cancel message on the bus only makes it stop sooner.

Bumps of one session from this node are applied in the order they were asked for (a chain of
tasks per session), so two turns started here back to back get their epochs in their
admission order, and a bump still runs to its end if the turn that asked for it is cancelled
meanwhile (its row is then what the next one reads). The bumps of all sessions starting at
once go to PostgreSQL together, one statement and one COMMIT (`agentos.store.pg_bumps`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agentos.errors import SessionNotFound
from agentos.store import pg_pool
from agentos.store.base import EpochBump as Bumped
from agentos.store.pg_bumps import ATTEMPTS, DEADLOCK, BumpBatches
from agentos.store.pg_health import classify
from agentos.store.pg_pool import pooled
from agentos.store.pg_rows import MESSAGE_AND_EVENT

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

STALE_SQLSTATE = "AOS01"  # raised by agentos_turn_fence (migration 0004)
_UNSETTLED_MAX = 1000

FENCED_INSERT_MESSAGE = MESSAGE_AND_EVENT.format(fence=" WHERE agentos_turn_fence($1::text, $2::text, $13::bigint)")
FENCED_INSERT_EVENT = """
INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq)
SELECT $1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::bigint, $7::bigint
WHERE agentos_turn_fence($1::text, $2::text, $8::bigint)
"""
# One statement, one round trip: read the old active turn under the row lock the UPDATE takes
# anyway (two bumps of one session serialise, each sees the other's result), bump, and record
# the old turn's end if it was still running (no answer stored: every turn stores one, whole or
# partial, when it ends). A fenced-out turn cannot record its own end any more, so its terminal
# event is written here, in the same transaction as its successor's start: the durable event
# log always holds one terminal event per turn, before the next turn's events.
_BUMP = """
WITH old AS (SELECT active_turn FROM sessions WHERE tenant_id = $1 AND session_id = $2 FOR UPDATE),
bumped AS (
    UPDATE sessions s SET turn_epoch = s.turn_epoch + 1, active_turn = {new_turn} FROM old
    WHERE s.tenant_id = $1 AND s.session_id = $2 {condition}
    RETURNING s.turn_epoch, old.active_turn AS previous
),
running AS (
    SELECT previous FROM bumped WHERE previous IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = bumped.previous AND m.role = 'assistant')
),
ended AS (
    INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq)
    SELECT $1, $2, previous, 'turn.cancelled', jsonb_build_object('turn_id', previous, 'reason', '{reason}'),
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
        (SELECT COALESCE(MAX(e.seq), 0) + 1 FROM events e WHERE e.tenant_id = $1 AND e.turn_id = previous)
    FROM running
)
SELECT turn_epoch, previous FROM bumped
"""
# A cancel from a node that does not run the turn: a bump only if a turn is still running. (A
# turn's own bump is `agentos.store.pg_bumps.BUMP_MANY`, the same statement for many sessions.)
CANCEL = _BUMP.format(
    new_turn="NULL",
    condition="AND old.active_turn IS NOT NULL AND NOT EXISTS"
    " (SELECT 1 FROM messages m WHERE m.turn_id = old.active_turn AND m.role = 'assistant')",
    reason="cancelled",
)


# A turn that ended with no answer stored lets go of its session (`end_turn(answered=False)`),
# unless a newer turn holds it already.
RELEASE = (
    "UPDATE sessions SET active_turn = NULL"
    " WHERE tenant_id = $1 AND session_id = $2 AND active_turn = $3 AND turn_epoch = $4"
)

# The session's running turn on any node, by the same rule as CANCEL's: it holds the epoch and
# has stored no answer (a turn stores one, whole or partial, when it ends, or lets go of the
# session: RELEASE).
RUNNING = """
SELECT s.active_turn FROM sessions s WHERE s.tenant_id = $1 AND s.session_id = $2 AND s.active_turn IS NOT NULL
AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = s.active_turn AND m.role = 'assistant')
"""


class TurnEpochs:
    """The epochs of the turns this node runs, and the bumps that hand them out."""

    def __init__(
        self,
        config: StoreConfig,
        pool: Callable[[], asyncpg.Pool],
        settled: Callable[[], Awaitable[None]],
        unavailable: Callable[[], tuple[type[Exception], ...]],
        on_events_lane: Callable[[str, tuple[Any, ...]], object],
    ) -> None:
        """`on_events_lane(sql, params)`: queue a write behind the events queued so far."""
        self._pool = pool
        self._on_events_lane = on_events_lane
        self._settled = settled  # every write queued so far is committed
        self._acquire_timeout_s = config.postgres_acquire_timeout_s
        self._bound_s = config.postgres_request_timeout_s  # a bump is awaited by a request
        self._unavailable = unavailable
        self._batches = BumpBatches(
            lambda: _connect(config), acquire_timeout_s=self._acquire_timeout_s, timeout_s=self._bound_s
        )
        self._epochs: dict[str, tuple[int, tuple[str, str]]] = {}  # turn id -> epoch, session; while it runs
        # Sessions whose last turn here ended with fenced writes perhaps still queued, and when.
        self._unsettled: dict[tuple[str, str], float] = {}
        self._chains: dict[tuple[str, str], asyncio.Task[Bumped | None]] = {}

    async def close(self) -> None:
        await self._batches.close()

    def epoch_of(self, turn_id: str) -> int | None:
        held = self._epochs.get(turn_id)
        return None if held is None else held[0]

    def end(self, turn_id: str, *, pending_writes: bool, answered: bool = True) -> None:
        held = self._epochs.pop(turn_id, None)
        if held is None:
            return
        if not answered:
            # On the events' lane, after the turn's terminal event: a newer turn's bump that
            # still finds this turn holding the session writes that event itself (and this
            # one's is refused); once the session is let go, this one's is committed.
            epoch, (tenant_id, session_id) = held
            self._on_events_lane(RELEASE, (tenant_id, session_id, turn_id, epoch))
        if not pending_writes:
            return
        now = asyncio.get_running_loop().time()
        self._unsettled.pop(held[1], None)
        self._unsettled[held[1]] = now  # insertion order is age order
        if len(self._unsettled) > _UNSETTLED_MAX:  # older than any bound: long committed (or failed)
            for key in [k for k, at in self._unsettled.items() if now - at > self._bound_s]:
                del self._unsettled[key]

    def route(self, turn_id: str, plain: str, fenced: str, params: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """The statement for a write of `turn_id`: fenced by its epoch while it runs here."""
        held = self._epochs.get(turn_id)
        return (plain, params) if held is None else (fenced, (*params, held[0]))

    async def begin(self, tenant_id: str, session_id: str, turn_id: str) -> Bumped:
        """Bump the session's epoch for `turn_id`: the new epoch, and the turn it fenced out.

        Raises:
            SessionNotFound: the session is gone (deleted, perhaps on another node).
            StoreUnavailable: the database cannot be reached, or did not answer in time.
        """
        bumped = await self._chained(tenant_id, session_id, turn_id)
        if bumped is None:
            raise SessionNotFound(session_id)
        return bumped

    async def cancel(self, tenant_id: str, session_id: str) -> Bumped | None:
        """Fence out the session's running turn, wherever it runs; None if none is running.

        Raises: StoreUnavailable: the database cannot be reached, or did not answer in time.
        """
        return await self._chained(tenant_id, session_id, None)

    async def _chained(self, tenant_id: str, session_id: str, turn_id: str | None) -> Bumped | None:
        key = (tenant_id, session_id)
        previous = self._chains.get(key)
        task = asyncio.ensure_future(self._bump(previous, key, turn_id))
        self._chains[key] = task
        task.add_done_callback(lambda t: self._done(key, t))
        # Shielded: a turn cancelled now must not leave its bump half done for the next one.
        return await asyncio.shield(task)

    def _done(self, key: tuple[str, str], task: asyncio.Task[Bumped | None]) -> None:
        if self._chains.get(key) is task:
            del self._chains[key]
        if not task.cancelled():
            task.exception()  # retrieved: a caller cancelled meanwhile must not leave it unread

    async def _bump(
        self, previous: asyncio.Task[Bumped | None] | None, key: tuple[str, str], turn_id: str | None
    ) -> Bumped | None:
        if previous is not None:
            await asyncio.wait([previous])  # its outcome is its caller's business
        # This node's earlier writes of the session (the partial answer and terminal event of a
        # turn cancelled or failed here) were made before this turn started: let them land first
        # instead of refusing them. A turn that completed left none (its answer was committed,
        # its last event goes unfenced), so the usual next turn does not wait for the lanes.
        try:
            async with asyncio.timeout(self._bound_s):
                if self._unsettled.pop(key, None) is not None:
                    await self._settled()
                row = await (self._fetch(CANCEL, key) if turn_id is None else self._batches.submit(key, turn_id))
        except Exception as exc:
            raise classify(exc, self._unavailable(), "start a turn (turn epoch)") from exc
        if row is None:
            return None
        if turn_id is not None:
            self._epochs[turn_id] = (row[0], key)
        return Bumped(row[0], row[1])

    async def _fetch(self, sql: str, args: tuple[Any, ...]) -> Any:
        # The share locks of fenced writes in other nodes' batches and bumps waiting for them can
        # form a cycle when two sessions are contended at once; PostgreSQL breaks it by failing
        # one statement (40P01), and this one statement can simply run again.
        for attempt in range(ATTEMPTS):
            try:
                async with pooled(self._pool(), self._acquire_timeout_s) as conn:
                    return await conn.fetchrow(sql, *args)
            except Exception as exc:
                if getattr(exc, "sqlstate", None) != DEADLOCK or attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover


class FencedTurns:
    """The store's side of turn epochs (`agentos.store.base.Store`), for `PostgresStore`."""

    _epochs: TurnEpochs

    async def begin_turn(self, tenant_id: str, session_id: str, turn_id: str) -> Bumped | None:
        return await self._epochs.begin(tenant_id, session_id, turn_id)

    async def cancel_turn(self, tenant_id: str, session_id: str) -> Bumped | None:
        return await self._epochs.cancel(tenant_id, session_id)

    def end_turn(self, turn_id: str, *, pending_writes: bool = True, answered: bool = True) -> None:
        self._epochs.end(turn_id, pending_writes=pending_writes, answered=answered)


async def _connect(config: StoreConfig) -> asyncpg.Connection:
    """A direct connection in the store's schema; failures are the driver's own (classified as
    unavailable by the caller), not start-up's ConfigError."""
    conn: asyncpg.Connection = await pg_pool.import_asyncpg().connect(
        config.postgres_url,
        timeout=pg_pool.CONNECT_TIMEOUT_S,
        server_settings=pg_pool.server_settings(config.postgres_schema),
    )
    return conn
