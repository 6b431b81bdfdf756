"""The run journal's tables (`runs.db`), and the migration that brings an older file up to date.

The schema runs at every open (`IF NOT EXISTS`), so an index added here is built on an older
file at its next open: the `runs_by_*` ones serve the run list (`agentos.journal.run_list`).
"""

from __future__ import annotations

import sqlite3

from agentos.kernel import RUN_TERMINAL_SQL

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS agents (
  tenant_id TEXT NOT NULL, name TEXT NOT NULL, spec TEXT NOT NULL, source TEXT NOT NULL,
  created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, PRIMARY KEY (tenant_id, name));
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, agent TEXT NOT NULL, session_id TEXT,
  parent_run_id TEXT, depth INTEGER NOT NULL, spec_ref TEXT NOT NULL, input TEXT NOT NULL,
  status TEXT NOT NULL, result TEXT, reason TEXT, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
  context_ref TEXT, owner TEXT,
  forked_from TEXT, forked_at_seq INTEGER);
CREATE INDEX IF NOT EXISTS runs_open ON runs (status) WHERE status NOT IN {RUN_TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_session ON runs (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant_id, created_ms, run_id);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (tenant_id, status, created_ms, run_id);
CREATE INDEX IF NOT EXISTS runs_by_agent ON runs (tenant_id, agent, created_ms, run_id);
CREATE TABLE IF NOT EXISTS steps (
  tenant_id TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
  operation_id TEXT NOT NULL, status TEXT NOT NULL, input_ref TEXT, payload_ref TEXT,
  attempts INTEGER NOT NULL DEFAULT 1, updated_ms INTEGER NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS payloads (hash TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS run_events (
  tenant_id TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
  data TEXT NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY (run_id, seq));
"""

# Columns added after a release of the schema: (table, column, type). `migrate` adds the ones an
# older runs.db lacks, so a data dir from an earlier version keeps working.
_ADDED_COLUMNS = (
    ("runs", "context_ref", "TEXT"),
    ("runs", "owner", "TEXT"),
    ("runs", "forked_from", "TEXT"),
    ("runs", "forked_at_seq", "INTEGER"),
)


def migrate(db: sqlite3.Connection) -> None:
    for table, column, kind in _ADDED_COLUMNS:
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
