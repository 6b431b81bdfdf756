"""A runs.db written before a column was added keeps working."""

from __future__ import annotations

import sqlite3

from agentos.agents.journal import SCHEMA, migrate


def test_migrate_adds_the_context_column_to_an_older_runs_table() -> None:
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA.replace(",\n  context_ref TEXT", ""))  # the table as the first release made it
    assert "context_ref" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    migrate(db)
    migrate(db)  # and running it again changes nothing
    assert "context_ref" in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
