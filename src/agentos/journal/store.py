"""Where the run journal lives: the `JournalStore` protocol, and its SQLite implementation.

The engine, the lifecycle and the service talk to the journal only through this protocol, so
the same code runs on the embedded `runs.db` (`SqliteJournalStore`, one writer thread, see
`agentos.journal.run_store`) and on PostgreSQL (`agentos.journal.postgres.PgJournalStore`, with
leases that let several nodes share the runs).

Writes are lists of statements built by the store's `journal` (its SQL dialect). A write that
belongs to a run names it (`run=`): on PostgreSQL it commits only while this node holds the
run's lease at the epoch it was given (fencing); SQLite has one node and ignores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from agentos.clock import wall_ms
from agentos.config import Settings
from agentos.journal.journal import SCHEMA, EventRow, Journal, RunRow, Step, migrate
from agentos.journal.run_list import ListedRun, RunQuery, list_runs_sql, listed
from agentos.journal.run_store import Op, RunStore, StoreStatistics
from agentos.journal.usage import model_tokens
from agentos.kernel import RUN_TERMINAL_SQL

OPEN_SESSION_RUN = (
    f"SELECT 1 FROM runs WHERE session_id = ? AND tenant_id = ? AND status NOT IN {RUN_TERMINAL_SQL} LIMIT 1"
)


class JournalStore(Protocol):
    """The run journal: ordered writes (group commit) and the reads the engine needs."""

    @property
    def journal(self) -> Journal:
        """Builds this store's statements (its SQL dialect)."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def now_ms(self) -> int:
        """The wall clock of the runs' timestamps and human deadlines: this host's (one node), or
        the database's carried forward by the monotonic clock (nodes that take each other's runs
        over must agree on it, whatever a node's own clock does)."""
        ...

    def statistics(self) -> StoreStatistics: ...

    async def wait_space(self) -> None: ...

    async def write(self, ops: Sequence[Op], *, run: str | None = None) -> None:
        """Return once `ops` are committed, all or none. Raises: StoreError (LeaseLost: `run`
        is another node's now)."""
        ...

    def write_nowait(self, ops: Sequence[Op], *, run: str | None = None, sheddable: bool = False) -> None: ...

    def adopt(self, run_id: str, epoch: int) -> None:
        """This node owns `run_id` at `epoch` (a new run's row is committed, or it was claimed)."""
        ...

    def release(self, run_id: str) -> None:
        """This node no longer owns `run_id` (it ended)."""
        ...

    async def load_run(self, tenant_id: str, run_id: str) -> RunRow | None: ...

    async def open_runs(self) -> list[RunRow]:
        """The unfinished runs this node should resume at start-up (every tenant's)."""
        ...

    async def list_runs(self, tenant_id: str, query: RunQuery) -> list[ListedRun]:
        """A page of the tenant's runs, newest first (`agentos.journal.run_list`)."""
        ...

    async def load_steps(self, tenant_id: str, run_id: str) -> list[Step]: ...

    async def resume_state(self, row: RunRow) -> tuple[Any, int, Any]:
        """(spec payload, last event seq, context payload or None) of a run to give a handle."""
        ...

    async def last_event_seq(self, run_id: str) -> int: ...

    async def load_events(self, tenant_id: str, run_id: str, after_seq: int) -> list[EventRow]: ...

    async def count_children(self, run_id: str) -> int: ...

    async def agents_of_every_tenant(self) -> list[tuple[str, str, str, str]]: ...

    async def agents_of_tenant(self, tenant_id: str) -> list[tuple[str, str, str, str]]: ...

    async def delete_session_runs(self, tenant_id: str, session_id: str) -> list[str]: ...

    async def session_has_open_runs(self, tenant_id: str, session_id: str) -> bool:
        """Whether a run of the tenant's session is unfinished (working, or waiting for a human)."""
        ...

    async def delete_idle_runs(self, tenant_id: str, before_ms: int, limit: int) -> list[str]:
        """Retention: up to `limit` finished top-level runs outside any session, last updated
        before `before_ms`, deleted with their children in one transaction; the deleted ids."""
        ...

    async def model_tokens(self, since_ms: int, before_ms: int) -> dict[str, int]: ...


class SqliteJournalStore:
    """`runs.db`: the embedded journal (one node; `run=` and leases do not apply)."""

    def __init__(self, path: Path | None) -> None:
        self.journal = Journal()
        self.runs = RunStore(path, schema=SCHEMA, migrate=migrate)

    async def open(self) -> None:
        await self.runs.open()

    async def close(self) -> None:
        await self.runs.close()

    def now_ms(self) -> int:
        return wall_ms()

    def statistics(self) -> StoreStatistics:
        return self.runs.statistics()

    async def wait_space(self) -> None:
        await self.runs.wait_space()

    async def write(self, ops: Sequence[Op], *, run: str | None = None) -> None:
        await self.runs.write(ops)

    def write_nowait(self, ops: Sequence[Op], *, run: str | None = None, sheddable: bool = False) -> None:
        self.runs.write_nowait(ops, sheddable=sheddable)

    def adopt(self, run_id: str, epoch: int) -> None:
        pass

    def release(self, run_id: str) -> None:
        pass

    async def load_run(self, tenant_id: str, run_id: str) -> RunRow | None:
        return await self.runs.read(lambda db: self.journal.load_run(db, tenant_id, run_id))

    async def open_runs(self) -> list[RunRow]:
        return await self.runs.read(self.journal.open_runs_of_every_tenant)

    async def list_runs(self, tenant_id: str, query: RunQuery) -> list[ListedRun]:
        sql, params = list_runs_sql(tenant_id, query)
        return listed(await self.runs.read(lambda db: db.execute(sql, params).fetchall()))

    async def load_steps(self, tenant_id: str, run_id: str) -> list[Step]:
        return await self.runs.read(lambda db: self.journal.load_steps(db, tenant_id, run_id))

    async def resume_state(self, row: RunRow) -> tuple[Any, int, Any]:
        def read(db: Any) -> tuple[Any, int, Any]:
            tenant, journal = row.tenant_id, self.journal
            context = journal.load_payload(db, tenant, row.context_ref) if row.context_ref else None
            return journal.load_payload(db, tenant, row.spec_ref), journal.last_event_seq(db, row.run_id), context

        return await self.runs.read(read)

    async def last_event_seq(self, run_id: str) -> int:
        return await self.runs.read(lambda db: self.journal.last_event_seq(db, run_id))

    async def load_events(self, tenant_id: str, run_id: str, after_seq: int) -> list[EventRow]:
        return await self.runs.read(lambda db: self.journal.load_events(db, tenant_id, run_id, after_seq))

    async def count_children(self, run_id: str) -> int:
        return await self.runs.read(lambda db: self.journal.count_children(db, run_id))

    async def agents_of_every_tenant(self) -> list[tuple[str, str, str, str]]:
        return await self.runs.read(self.journal.agents_of_every_tenant)

    async def agents_of_tenant(self, tenant_id: str) -> list[tuple[str, str, str, str]]:
        return await self.runs.read(lambda db: self.journal.agents_of_tenant(db, tenant_id))

    async def delete_session_runs(self, tenant_id: str, session_id: str) -> list[str]:
        return await self.runs.delete(lambda db: self.journal.delete_session_runs(db, tenant_id, session_id))

    async def session_has_open_runs(self, tenant_id: str, session_id: str) -> bool:
        params = (session_id, tenant_id)
        return await self.runs.read(lambda db: db.execute(OPEN_SESSION_RUN, params).fetchone() is not None)

    async def delete_idle_runs(self, tenant_id: str, before_ms: int, limit: int) -> list[str]:
        return await self.runs.delete(lambda db: self.journal.delete_idle_runs(db, tenant_id, before_ms, limit))

    async def model_tokens(self, since_ms: int, before_ms: int) -> dict[str, int]:
        return await model_tokens(self.runs, since_ms, before_ms)


def open_journal_store(settings: Settings, data_dir: Path | None) -> JournalStore:
    """PostgreSQL when `store.backend = "postgres"` (and the store is on), else `runs.db` in
    `data_dir` (in memory without one)."""
    if settings.store.enabled and settings.store.backend == "postgres" and data_dir is not None:
        from agentos.journal.postgres import PgJournalStore  # asyncpg is loaded only for this backend

        return PgJournalStore(settings.store, settings.coordination)
    return SqliteJournalStore(data_dir / "runs.db" if data_dir else None)
