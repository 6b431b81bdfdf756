"""The run journal on PostgreSQL (`store.backend = "postgres"`): the tables of migration 0002.

Theory of operation. The same statements as `runs.db` (`PgJournal`, PostgreSQL's dialect of
`Journal`), written by one `FencedWriter`: batched, one transaction per batch, and an awaited
write returns after COMMIT (a journaled step is acknowledged only once durable; events and other
`write_nowait` rows ride in the same batches, never a round trip per token). Reads go to the
pool after a barrier on the writer, so a read sees every write queued before it.

Leases. Every unfinished run has a row in `run_leases`: the node that runs it, until when (the
database's `now()`, never a node's clock) and an epoch. A new run is born owned by the node that
admitted it (epoch 1); `agentos.agents.leases.LeaseKeeper` renews this node's leases and takes
over the runs whose lease expired (epoch + 1). Each write of a run is fenced by the epoch this
node holds it at (`FencedWriter`, below). The lease row goes with the run's end.

Tenancy: as in `runs.db`, every read a request can reach names the tenant in its WHERE clause;
the indexes those reads use are led by `tenant_id`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from agentos.clock import ReferenceWall
from agentos.coordination.node import node_id
from agentos.errors import LeaseLost, StoreError, StoreUnavailable
from agentos.journal.journal import EventRow, Journal, RunRow, Step
from agentos.journal.run_list import ListedRun, RunQuery, list_runs_sql, listed
from agentos.journal.run_store import Op, StoreStatistics
from agentos.kernel import RUN_TERMINAL_SQL
from agentos.store import pg_pool
from agentos.store.pg_health import bounded_fetch, classify, outage_of, within
from agentos.store.pg_pool import pooled
from agentos.store.pg_writer import PgOp, PgWriter

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import CoordinationConfig, StoreConfig

REQUESTS_CHANNEL = "agentos_run_requests"  # `pg_pool.channel` adds the schema
AGENTS_CHANNEL = "agentos_agents"  # a write of an agent NOTIFYs its tenant here (`agentos.agents.changes`)
# The database's clock in epoch milliseconds (`clock_timestamp()`: the time of the read, not of
# the transaction's start), the reference of `PgJournalStore.clock`.
DB_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::float8"
log = logging.getLogger("agentos.agents")

_WRITER_ACQUIRE_TIMEOUT_S = 30.0
_TERMINAL = RUN_TERMINAL_SQL
# Closing: the node's runs expire now, and it no longer counts among the nodes that take runs over.
_HAND_OVER = """WITH gone AS (DELETE FROM run_nodes WHERE node = $1)
UPDATE run_leases SET expires_at = now() WHERE owner = $1"""


# -- the writer: group commit, fenced by the leases ------------------------------------------
#
# The run journal's writer on PostgreSQL: `PgWriter`'s batches (group commit), with fencing.
#
# Each queued item is a unit: the statements of one `JournalStore.write` (all or none) and, when
# they belong to a run, its fence: (run id, the lease epoch this node holds it at). A batch is
# one transaction that first locks the lease rows of its runs `FOR SHARE` and checks each fence;
# the lock holds until COMMIT, so a takeover (which updates the lease row) waits for the batch, and
# every batch after the takeover sees the new epoch. A node that lost a run therefore cannot
# write to it any more, even if it was paused past its lease and does not know yet.
#
# A failed fence fails the batch, which `PgWriter` then applies unit by unit (each in its own
# transaction): the unit of the lost run fails with `LeaseLost`, the others commit. Losing a
# lease is rare (a node that stopped renewing), so that slow path costs nothing in the usual case.

UNIT = "unit"  # the `sql` of a PgOp whose params are a `Unit`
_LOCK_LEASES = "SELECT run_id, epoch FROM run_leases WHERE run_id = any($1::text[]) AND owner = $2 FOR SHARE"


class Unit(NamedTuple):
    ops: Sequence[tuple[str, Sequence[Any]]]
    fence: tuple[str, int] | None  # (run id, epoch)


class FencedWriter(PgWriter):
    """A `PgWriter` whose items are `Unit`s, each fenced by its run's lease."""

    def __init__(self, name: str, pool: asyncpg.Pool, *, node: str, **options: Any) -> None:
        super().__init__(name, pool, **options)
        self._node = node

    async def _commit(self, batch: Sequence[PgOp]) -> bool:
        # A unit writer is handed only Units (`_unit`) and barriers (no sql).
        units: list[Unit] = [op.params for op in batch if op.sql is not None]  # type: ignore[misc]  # see above
        if not units:
            return False
        fences = dict(unit.fence for unit in units if unit.fence is not None)
        runs: list[tuple[str, list[Sequence[Any]]]] = []
        for unit in units:
            for sql, params in unit.ops:
                if runs and runs[-1][0] == sql:
                    runs[-1][1].append(params)
                else:
                    runs.append((sql, [params]))
        async with pooled(self._pool, self._acquire_timeout_s) as conn, conn.transaction():
            if fences:
                held = dict(await conn.fetch(_LOCK_LEASES, list(fences), self._node))
                lost = sorted(run for run, epoch in fences.items() if held.get(run) != epoch)
                if lost:
                    raise LeaseLost(f"{self.name}: the lease of {', '.join(lost)} is another node's now")
            for sql, rows in runs:
                await conn.executemany(sql, rows)
        return True

    async def _apply_alone(self, op: PgOp) -> BaseException | None:
        try:
            await self._commit([op])
        except LeaseLost as exc:
            return exc
        except Exception as exc:
            kind = StoreUnavailable if isinstance(exc, self._fatal_errors) else StoreError
            return kind(f"{self.name}: write failed ({type(exc).__name__}: {exc})")
        return None


# -- the longer reads and the deletion (migration 0002's tables) ------------------------------

STEPS = """SELECT s.seq, s.kind, s.operation_id, s.status, i.body, o.body, s.attempts FROM steps s
LEFT JOIN payloads i ON i.tenant_id = s.tenant_id AND i.hash = s.input_ref
LEFT JOIN payloads o ON o.tenant_id = s.tenant_id AND o.hash = s.payload_ref
WHERE s.run_id = $1 AND s.tenant_id = $2 ORDER BY s.seq"""

_TOKENS = "COALESCE((convert_from(p.body, 'UTF8')::jsonb #>> '{usage,%s}')::bigint, 0)"
MODEL_TOKENS = f"""SELECT s.tenant_id, SUM({_TOKENS % "prompt_tokens"} + {_TOKENS % "completion_tokens"})
FROM steps s JOIN payloads p ON p.tenant_id = s.tenant_id AND p.hash = s.payload_ref
WHERE s.kind = 'model' AND s.status = 'done' AND s.updated_ms >= $1 AND s.updated_ms < $2 GROUP BY s.tenant_id"""

# One statement, so one transaction. A child run's id is its parent's followed by `.n`. Every
# part of a statement sees the rows as they were before it, so a payload goes only when no run
# or step outside the doomed ones refers to it (payloads are shared by hash within a tenant).
_DOOMED = "run_id IN (SELECT run_id FROM doomed)"
_DELETE_DOOMED = f"""refs AS (
  SELECT spec_ref AS ref FROM runs WHERE {_DOOMED}
  UNION SELECT context_ref FROM runs WHERE {_DOOMED}
  UNION SELECT input_ref FROM steps WHERE tenant_id = $1 AND {_DOOMED}
  UNION SELECT payload_ref FROM steps WHERE tenant_id = $1 AND {_DOOMED}
), gone_events AS (DELETE FROM run_events WHERE tenant_id = $1 AND {_DOOMED}
), gone_steps AS (DELETE FROM steps WHERE tenant_id = $1 AND {_DOOMED}
), gone_leases AS (DELETE FROM run_leases WHERE {_DOOMED}
), gone_requests AS (DELETE FROM run_requests WHERE {_DOOMED}
), gone_payloads AS (DELETE FROM payloads d WHERE d.tenant_id = $1 AND d.hash IN (SELECT ref FROM refs)
  AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.tenant_id = $1 AND NOT x.{_DOOMED}
                  AND (x.spec_ref = d.hash OR x.context_ref = d.hash))
  AND NOT EXISTS (SELECT 1 FROM steps x WHERE x.tenant_id = $1 AND NOT x.{_DOOMED}
                  AND (x.input_ref = d.hash OR x.payload_ref = d.hash))
), gone_runs AS (DELETE FROM runs WHERE {_DOOMED} RETURNING run_id)
SELECT run_id FROM gone_runs"""
DELETE_SESSION_RUNS = f"""WITH doomed AS (
  SELECT r.run_id FROM runs r WHERE r.tenant_id = $1 AND (r.session_id = $2 OR EXISTS (
    SELECT 1 FROM runs p WHERE p.tenant_id = $1 AND p.session_id = $2 AND starts_with(r.run_id, p.run_id || '.')))
), {_DELETE_DOOMED}"""
# Retention: up to $3 finished top-level runs outside any session updated before $2, with their children.
DELETE_IDLE_RUNS = f"""WITH top AS (
  SELECT run_id FROM runs WHERE tenant_id = $1 AND parent_run_id IS NULL AND session_id IS NULL
  AND status IN {RUN_TERMINAL_SQL} AND updated_ms < $2 ORDER BY updated_ms LIMIT $3
), doomed AS (
  SELECT r.run_id FROM runs r WHERE r.tenant_id = $1 AND (r.run_id IN (SELECT run_id FROM top) OR EXISTS (
    SELECT 1 FROM top p WHERE starts_with(r.run_id, p.run_id || '.')))
), {_DELETE_DOOMED}"""


class PgJournal(Journal):
    """PostgreSQL's statements, with the parameters of SQLite's."""

    PUT_PAYLOAD = "INSERT INTO payloads (hash, tenant_id, body) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
    INSERT_RUN = (
        "INSERT INTO runs VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
        " ON CONFLICT DO NOTHING"
    )
    SET_STATUS = (
        "UPDATE runs SET status = $1, result = coalesce($2, result), reason = coalesce($3, reason), updated_ms = $4"
        " WHERE run_id = $5"
    )
    UPSERT_STEP = (
        "INSERT INTO steps (tenant_id, run_id, seq, kind, operation_id, status, input_ref, updated_ms)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, run_id, seq) DO UPDATE SET"
        " status = excluded.status, attempts = steps.attempts + 1, updated_ms = excluded.updated_ms"
    )
    FINISH_STEP = (
        "UPDATE steps SET status = $1, payload_ref = $2, updated_ms = $3 WHERE run_id = $4 AND seq = $5"
        " AND tenant_id = $6"
    )
    INSERT_EVENT = "INSERT INTO run_events VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
    # The NOTIFY in the same statement: other nodes hear of exactly the committed writes
    # (`agentos.agents.changes`); $7 is the schema's `AGENTS_CHANNEL`.
    PUT_AGENT = (
        "WITH put AS (INSERT INTO agents VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, name) DO UPDATE SET"
        " spec = excluded.spec, source = excluded.source, updated_ms = excluded.updated_ms RETURNING tenant_id)"
        " SELECT pg_notify($7, tenant_id) FROM put"
    )
    _ENDED = ("DELETE FROM run_leases WHERE run_id = $1", "DELETE FROM run_requests WHERE run_id = $1")
    _LEASE = "INSERT INTO run_leases VALUES ($1, $2, $3, 1, now() + make_interval(secs => $4)) ON CONFLICT DO NOTHING"

    def __init__(self, node: str, lease_s: float) -> None:
        self._node = node
        self._lease_s = lease_s
        self.agents_channel = ""  # per schema: set by `PgJournalStore.open`, before any write

    def put_agent(self, tenant_id: str, name: str, spec_json: str, source: str, now_ms: int) -> Op:
        sql, params = super().put_agent(tenant_id, name, spec_json, source, now_ms)
        return sql, (*params, self.agents_channel)

    def create_run(self, row: RunRow) -> list[Op]:
        return [self.insert_run(row), (self._LEASE, (row.run_id, row.tenant_id, self._node, self._lease_s))]

    def end_run(self, run_id: str, status: str, now_ms: int, *, result: str | None = None, reason: str) -> list[Op]:
        ended = self.set_status(run_id, status, now_ms, result=result, reason=reason)
        return [ended, *self.ended(run_id)]

    def ended(self, run_id: str) -> list[Op]:
        """The lease of a run that ended, and what other nodes asked of it and was not applied."""
        return [(sql, (run_id,)) for sql in self._ENDED]


class PgJournalStore:
    """The `JournalStore` of several nodes sharing one PostgreSQL database."""

    def __init__(self, config: StoreConfig, coordination: CoordinationConfig, *, node: str = "") -> None:
        self.node = node or node_id()  # tests give two stores of one process two node ids
        self.lease_s = coordination.run_lease_s
        self.journal = PgJournal(self.node, self.lease_s)
        self.epochs: dict[str, int] = {}  # the runs this node owns, at the epoch it holds them
        self.config = config
        self._bound_s = config.postgres_request_timeout_s
        self._pool: asyncpg.Pool | None = None
        self._writer: FencedWriter | None = None
        self.unavailable: tuple[type[Exception], ...] = ()
        self._statements = 0
        self.channel = ""  # the NOTIFY of `run_requests`, per schema (`agentos.agents.leases`): set by `open`
        self.clock = ReferenceWall()  # the database's clock here, rebased at open and each lease round
        self.now_ms = self.clock.now_ms

    async def open(self) -> None:
        """Migrate, open the pool, start the writer.

        Raises:
            ConfigError: naming store.postgres_url (unreachable, refused, schema mismatch).
        """
        self.unavailable = pg_pool.connection_errors()
        async with pg_pool.migrated(self.config) as conn:
            sent = time.monotonic_ns()
            schema, db_ms = await conn.fetchrow(f"SELECT current_schema(), {DB_NOW_MS}")
            self.clock.rebase(db_ms, sent, time.monotonic_ns())
            self.channel = pg_pool.channel(REQUESTS_CHANNEL, schema)
            self.journal.agents_channel = pg_pool.channel(AGENTS_CHANNEL, schema)
        self._pool = await pg_pool.create_pool(self.config)
        c = self.config
        self._writer = FencedWriter(
            "runs",
            self._pool,
            node=self.node,
            fatal_errors=self.unavailable,
            queue_max_rows=c.queue_max_rows,
            batch_max_rows=c.batch_max_rows,
            linger_ms=c.linger_ms,
            acquire_timeout_s=max(c.postgres_acquire_timeout_s, _WRITER_ACQUIRE_TIMEOUT_S),
            outage=outage_of(c.postgres_url),
        )
        self._writer.start()

    async def close(self) -> None:
        """Commit what is queued, then hand this node's runs over: their leases expire now, so
        another node (or this one's next start) takes them over at once."""
        if self._writer is not None:
            await self._writer.close()
        if self._pool is None:
            return
        try:
            await self._pool.execute(_HAND_OVER, self.node)
        except Exception as exc:  # the leases then expire by themselves after run_lease_s
            log.warning("run leases not handed over (%s: %s)", type(exc).__name__, exc)
        self.epochs.clear()
        await self._pool.close()
        self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "journal not open"
        return self._pool

    @property
    def _lane(self) -> FencedWriter:
        assert self._writer is not None, "journal not open"
        return self._writer

    def statistics(self) -> StoreStatistics:
        if self._writer is None:
            return StoreStatistics(batches=0, statements=self._statements, queued=0)
        return StoreStatistics.of(self._writer.statistics(), self._statements)

    async def wait_space(self) -> None:
        await self._lane.wait_space()

    # --- writes ---

    def _unit(self, ops: Sequence[Op], run: str | None) -> Unit:
        self._statements += len(ops)
        if run is None:
            return Unit(ops, None)
        epoch = self.epochs.get(run)
        if epoch is None:
            raise LeaseLost(f"run {run!r} is not this node's")
        return Unit(ops, (run, epoch))

    async def write(self, ops: Sequence[Op], *, run: str | None = None) -> None:
        """Raises: LeaseLost (the run is another node's), StoreError, StoreUnavailable."""
        await self._lane.submit(UNIT, self._unit(ops, run))

    def write_nowait(self, ops: Sequence[Op], *, run: str | None = None, sheddable: bool = False) -> None:
        self._lane.put(UNIT, self._unit(ops, run), sheddable=sheddable)

    def adopt(self, run_id: str, epoch: int) -> None:
        self.epochs[run_id] = epoch

    def release(self, run_id: str) -> None:
        self.epochs.pop(run_id, None)

    # --- reads ---

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """Rows of a read that sees every write queued before it.

        Raises:
            StoreUnavailable: the database cannot be reached, or a bound passed.
            StoreError: the database failed otherwise.
        """
        await within(self._lane.barrier(), "waiting for earlier run writes", self._bound_s)
        return await self.query(sql, *args)

    async def query(self, sql: str, *args: Any) -> list[Any]:
        """Rows of a statement on the pool, not ordered after queued writes (the leases' own).

        Raises: StoreUnavailable, StoreError.
        """
        return await bounded_fetch(self.pool, self.config, self.unavailable, "run journal query", sql, *args)

    async def load_run(self, tenant_id: str, run_id: str) -> RunRow | None:
        rows = await self.fetch("SELECT * FROM runs WHERE run_id = $1 AND tenant_id = $2", run_id, tenant_id)
        return RunRow(*rows[0]) if rows else None

    async def open_runs(self) -> list[RunRow]:
        """None at start-up: on PostgreSQL the `LeaseKeeper` takes over the unfinished runs whose
        lease expired (a restarted node is a new node: its old leases expire first)."""
        return []

    async def list_runs(self, tenant_id: str, query: RunQuery) -> list[ListedRun]:
        sql, params = list_runs_sql(tenant_id, query, numbered=True)
        return listed(await self.fetch(sql, *params))

    async def load_steps(self, tenant_id: str, run_id: str) -> list[Step]:
        rows = await self.fetch(STEPS, run_id, tenant_id)
        return [Step(r[0], r[1], r[2], r[3], _decode(r[4]), _decode(r[5]), r[6]) for r in rows]

    async def resume_state(self, row: RunRow) -> tuple[Any, int, Any]:
        refs = [row.spec_ref, row.context_ref or row.spec_ref]
        bodies = dict(
            await self.fetch(
                "SELECT hash, body FROM payloads WHERE tenant_id = $1 AND hash = any($2)", row.tenant_id, refs
            )
        )
        context = _decode(bodies.get(row.context_ref)) if row.context_ref else None
        return _decode(bodies.get(row.spec_ref)), await self.last_event_seq(row.run_id), context

    async def last_event_seq(self, run_id: str) -> int:
        rows = await self.fetch("SELECT max(seq) FROM run_events WHERE run_id = $1", run_id)
        return int(rows[0][0] or 0)

    async def load_events(self, tenant_id: str, run_id: str, after_seq: int) -> list[EventRow]:
        rows = await self.fetch(
            "SELECT seq, type, data, created_ms FROM run_events WHERE tenant_id = $1 AND run_id = $2 AND seq > $3"
            " ORDER BY seq",
            tenant_id,
            run_id,
            after_seq,
        )
        return [EventRow(*r) for r in rows]

    async def count_children(self, run_id: str) -> int:
        rows = await self.fetch("SELECT count(*) FROM runs WHERE parent_run_id = $1", run_id)
        return int(rows[0][0])

    async def agents_of_every_tenant(self) -> list[tuple[str, str, str, str]]:
        rows = await self.fetch("SELECT tenant_id, name, spec, source FROM agents ORDER BY tenant_id, name")
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def agents_of_tenant(self, tenant_id: str) -> list[tuple[str, str, str, str]]:
        sql = "SELECT tenant_id, name, spec, source FROM agents WHERE tenant_id = $1 ORDER BY name"
        return [(r[0], r[1], r[2], r[3]) for r in await self.fetch(sql, tenant_id)]

    async def delete_session_runs(self, tenant_id: str, session_id: str) -> list[str]:
        """Every run of the tenant's session with its children, steps, events, leases, requests
        and the payloads nothing else refers to, in one transaction."""
        await within(self._lane.barrier(), "waiting for earlier run writes", self._bound_s)
        try:
            async with pooled(self.pool, self.config.postgres_acquire_timeout_s) as conn:
                rows = await conn.fetch(DELETE_SESSION_RUNS, tenant_id, session_id, timeout=self._bound_s)
        except Exception as exc:
            raise classify(exc, self.unavailable, "run deletion") from exc
        return sorted(r[0] for r in rows)

    async def session_has_open_runs(self, tenant_id: str, session_id: str) -> bool:
        sql = f"SELECT 1 FROM runs WHERE session_id = $1 AND tenant_id = $2 AND status NOT IN {_TERMINAL} LIMIT 1"
        return bool(await self.fetch(sql, session_id, tenant_id))

    async def delete_idle_runs(self, tenant_id: str, before_ms: int, limit: int) -> list[str]:
        """As the SQLite journal's, in one statement (leases and requests included)."""
        try:
            async with pooled(self.pool, self.config.postgres_acquire_timeout_s) as conn:
                rows = await conn.fetch(DELETE_IDLE_RUNS, tenant_id, before_ms, limit, timeout=self._bound_s)
        except Exception as exc:
            raise classify(exc, self.unavailable, "run deletion") from exc
        return sorted(r[0] for r in rows)

    async def model_tokens(self, since_ms: int, before_ms: int) -> dict[str, int]:
        return {r[0]: int(r[1]) for r in await self.fetch(MODEL_TOKENS, since_ms, before_ms)}


def _decode(body: bytes | None) -> Any:
    return msgspec.json.decode(body) if body is not None else None
