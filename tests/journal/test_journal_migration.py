"""A runs.db written before a column was added keeps working."""

from __future__ import annotations

import sqlite3

from agentos.journal.journal import SCHEMA, migrate


def test_migrate_adds_the_context_column_to_an_older_runs_table() -> None:
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA.replace(",\n  context_ref TEXT", ""))  # the table as the first release made it
    assert "context_ref" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    migrate(db)
    migrate(db)  # and running it again changes nothing
    assert "context_ref" in {row[1] for row in db.execute("PRAGMA table_info(runs)")}


def test_opening_an_older_runs_db_adds_the_session_index_deletion_uses() -> None:
    db = sqlite3.connect(":memory:")
    first_release = SCHEMA.replace(",\n  context_ref TEXT", "")
    db.executescript(first_release.replace("CREATE INDEX IF NOT EXISTS runs_session", "CREATE INDEX IF NOT EXISTS x"))
    db.execute("DROP INDEX x")
    db.executescript(SCHEMA)  # what RunStore.open runs on every start
    migrate(db)
    plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE session_id = 's'"))
    assert "runs_session" in plan
