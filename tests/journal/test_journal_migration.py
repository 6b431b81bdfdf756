"""A runs.db written before a column was added keeps working."""

from __future__ import annotations

import sqlite3

from agentos.journal.journal import SCHEMA, RunRow, migrate

FORKS = ",\n  forked_from TEXT, forked_at_seq INTEGER"  # added by the release that made forks
OWNERS = ", owner TEXT"  # added by the release that made end users (issue 30), with forks
BEFORE_FORKS = SCHEMA.replace(FORKS, "").replace(OWNERS, "")


def test_migrate_adds_the_context_column_to_an_older_runs_table() -> None:
    db = sqlite3.connect(":memory:")
    db.executescript(BEFORE_FORKS.replace(",\n  context_ref TEXT", ""))  # the table as the first release made it
    assert "context_ref" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    migrate(db)
    migrate(db)  # and running it again changes nothing
    assert "context_ref" in {row[1] for row in db.execute("PRAGMA table_info(runs)")}


def test_opening_an_older_runs_db_adds_the_session_index_deletion_uses() -> None:
    db = sqlite3.connect(":memory:")
    first_release = BEFORE_FORKS.replace(",\n  context_ref TEXT", "")
    db.executescript(first_release.replace("CREATE INDEX IF NOT EXISTS runs_session", "CREATE INDEX IF NOT EXISTS x"))
    db.execute("DROP INDEX x")
    db.executescript(SCHEMA)  # what RunStore.open runs on every start
    migrate(db)
    plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE session_id = 's'"))
    assert "runs_session" in plan


def test_migrate_adds_the_owner_and_fork_columns_after_the_others() -> None:
    """In the order PostgreSQL's migrations add them (0017 owners, 0019 forks): a run's row is
    written and read by position."""
    db = sqlite3.connect(":memory:")
    assert FORKS in SCHEMA and OWNERS in SCHEMA
    db.executescript(BEFORE_FORKS)
    db.execute(
        "INSERT INTO runs VALUES ('r', 't', 'a', NULL, NULL, 0, 's', 'in', 'completed', 'ok', 'done', 1, 2, NULL)"
    )
    migrate(db)
    migrate(db)
    columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    assert columns[-4:] == ["context_ref", "owner", "forked_from", "forked_at_seq"]
    row = RunRow(*db.execute("SELECT * FROM runs").fetchone())  # an older run reads as no fork
    assert row.result == "ok" and row.origin() is None and row.to_dict()["forked_from"] is None
    assert row.owner is None  # an older run: a tenant key's
