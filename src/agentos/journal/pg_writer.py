"""The run journal's writer on PostgreSQL: `PgWriter`'s batches (group commit), with fencing.

Each queued item is a unit: the statements of one `JournalStore.write` (all or none) and, when
they belong to a run, its fence: (run id, the lease epoch this node holds it at). A batch is
one transaction that first locks the lease rows of its runs `FOR SHARE` and checks each fence;
the lock holds until COMMIT, so a takeover (which updates the lease row) waits for the batch, and
every batch after the takeover sees the new epoch. A node that lost a run therefore cannot
write to it any more, even if it was paused past its lease and does not know yet.

A failed fence fails the batch, which `PgWriter` then applies unit by unit (each in its own
transaction): the unit of the lost run fails with `LeaseLost`, the others commit. Losing a
lease is rare (a node that stopped renewing), so that slow path costs nothing in the usual case.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from agentos.errors import LeaseLost, StoreError, StoreUnavailable
from agentos.store.pg_writer import PgOp, PgWriter

if TYPE_CHECKING:
    import asyncpg

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

    async def _commit(self, batch: Sequence[PgOp]) -> None:
        units: list[Unit] = [op.params for op in batch if op.sql is not None]  # type: ignore[misc]
        if not units:
            return
        fences = dict(unit.fence for unit in units if unit.fence is not None)
        runs: list[tuple[str, list[Sequence[Any]]]] = []
        for unit in units:
            for sql, params in unit.ops:
                if runs and runs[-1][0] == sql:
                    runs[-1][1].append(params)
                else:
                    runs.append((sql, [params]))
        async with self._pool.acquire(timeout=self._acquire_timeout_s) as conn, conn.transaction():
            if fences:
                held = dict(await conn.fetch(_LOCK_LEASES, list(fences), self._node))
                lost = sorted(run for run, epoch in fences.items() if held.get(run) != epoch)
                if lost:
                    raise LeaseLost(f"{self.name}: the lease of {', '.join(lost)} is another node's now")
            for sql, rows in runs:
                await conn.executemany(sql, rows)

    async def _apply_alone(self, op: PgOp) -> BaseException | None:
        try:
            await self._commit([op])
        except LeaseLost as exc:
            return exc
        except Exception as exc:
            kind = StoreUnavailable if isinstance(exc, self._fatal_errors) else StoreError
            return kind(f"{self.name}: write failed ({type(exc).__name__}: {exc})")
        return None
