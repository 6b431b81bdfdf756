"""Deleting runs from the SQLite journal (`runs.db`): a session's runs, or the finished runs
outside any session that outlived their tenant's retention (`agentos.runtime.retention`); with
their child runs, steps, events, and the payloads nothing else refers to, in the caller's
transaction. (The PostgreSQL journal does the same in one statement: `agentos.journal.postgres`.)"""

from __future__ import annotations

import sqlite3

from agentos.kernel import RUN_TERMINAL_SQL

_DELETION_SETUP = (
    "CREATE TEMP TABLE IF NOT EXISTS doomed_runs (run_id TEXT PRIMARY KEY)",
    "CREATE TEMP TABLE IF NOT EXISTS doomed_payloads (hash TEXT PRIMARY KEY)",
    "DELETE FROM temp.doomed_runs",
    "DELETE FROM temp.doomed_payloads",
)
_DOOM_SESSION_RUNS = (
    "INSERT OR IGNORE INTO temp.doomed_runs SELECT run_id FROM runs WHERE session_id = ? AND tenant_id = ?"
)
# Top-level runs only (their children follow by id), oldest first, a batch at a time.
_DOOM_IDLE_RUNS = (
    "INSERT OR IGNORE INTO temp.doomed_runs SELECT run_id FROM runs WHERE tenant_id = ? AND parent_run_id IS NULL"
    f" AND session_id IS NULL AND status IN {RUN_TERMINAL_SQL} AND updated_ms < ? ORDER BY updated_ms LIMIT ?"
)
_DOOM_CHILD_RUNS = (
    "INSERT OR IGNORE INTO temp.doomed_runs SELECT c.run_id FROM temp.doomed_runs d"
    " JOIN runs c ON c.run_id > d.run_id || '.' AND c.run_id < d.run_id || '/' WHERE c.tenant_id = ?"
)
_DOOMED = "IN (SELECT run_id FROM temp.doomed_runs)"
_DOOM_PAYLOADS = f"""
INSERT OR IGNORE INTO temp.doomed_payloads SELECT ref FROM (
  SELECT spec_ref AS ref FROM runs WHERE run_id {_DOOMED}
  UNION SELECT context_ref FROM runs WHERE run_id {_DOOMED}
  UNION SELECT input_ref FROM steps WHERE run_id {_DOOMED}
  UNION SELECT payload_ref FROM steps WHERE run_id {_DOOMED}
) WHERE ref IS NOT NULL
"""
_REFERRED = "IN (SELECT hash FROM temp.doomed_payloads)"
_LIVE_DOOMED_PAYLOADS = f"""
SELECT spec_ref FROM runs WHERE spec_ref {_REFERRED}
UNION SELECT context_ref FROM runs WHERE context_ref {_REFERRED}
UNION SELECT input_ref FROM steps WHERE input_ref {_REFERRED}
UNION SELECT payload_ref FROM steps WHERE payload_ref {_REFERRED}
"""


def delete_session_runs(db: sqlite3.Connection, tenant_id: str, session_id: str) -> list[str]:
    """Delete every run of the tenant's `session_id` with its child runs, steps, events and payloads.

    A child run's id is its parent's followed by `.n`, so the id range `(r., r/)` finds
    every descendant on the primary key. A payload goes only when no remaining run or step
    refers to it: payloads are shared by hash (an agent's spec by all its runs). That check
    scans the runs and steps tables once: the price of a deletion, not of a turn.

    Returns:
        the ids of the deleted runs (the caller removes their workspaces and handles).
    """
    for statement in _DELETION_SETUP:
        db.execute(statement)
    db.execute(_DOOM_SESSION_RUNS, (session_id, tenant_id))
    return _delete_doomed(db, tenant_id)


def delete_idle_runs(db: sqlite3.Connection, tenant_id: str, before_ms: int, limit: int) -> list[str]:
    """Delete up to `limit` finished top-level runs of the tenant outside any session, last updated
    before `before_ms` (oldest first), with their child runs, steps, events and payloads.

    Returns:
        the ids of the deleted runs, children included.
    """
    for statement in _DELETION_SETUP:
        db.execute(statement)
    db.execute(_DOOM_IDLE_RUNS, (tenant_id, before_ms, limit))
    return _delete_doomed(db, tenant_id)


def _delete_doomed(db: sqlite3.Connection, tenant_id: str) -> list[str]:
    """Delete the runs in `temp.doomed_runs`, their descendants and what only they used."""
    db.execute(_DOOM_CHILD_RUNS, (tenant_id,))
    run_ids = [row[0] for row in db.execute("SELECT run_id FROM temp.doomed_runs ORDER BY run_id")]
    if not run_ids:
        return []
    db.execute(_DOOM_PAYLOADS)
    for table in ("run_events", "steps", "runs"):
        db.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM temp.doomed_runs)")
    live = [(row[0],) for row in db.execute(_LIVE_DOOMED_PAYLOADS)]
    db.executemany("DELETE FROM temp.doomed_payloads WHERE hash = ?", live)
    db.execute("DELETE FROM payloads WHERE hash IN (SELECT hash FROM temp.doomed_payloads)")
    return run_ids
