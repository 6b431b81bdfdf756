"""Deleting a session leaves nothing of it behind: transcript, events, JSONL lines, runs.

The store side of defect 7, on real SQLite files and a real JSONL directory. What the
service adds on top (workspaces, run handles) is tested with the service.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from agentos.config import StoreConfig
from agentos.journal.journal import SCHEMA, Journal, RunRow, migrate
from agentos.journal.run_store import Op, RunStore
from agentos.store.records import EventRecord, MessageRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore

DOOMED, KEPT = "ses_doomed", "ses_kept"
SECRET = "secret-transcript-7"  # in every row the doomed session produced, and only there
SPEC = {"name": "helper", "model": "m", "instructions": "be brief"}  # one payload shared by both sessions' runs
COMMON = {"ok": True}  # a tool result both sessions' runs happened to get


def run_ops(
    journal: Journal, run_id: str, session_id: str | None, parent: str | None, text: str, tenant: str = "default"
) -> list[Op]:
    spec_ref, put_spec = journal.payload(tenant, SPEC)
    context_ref, put_context = journal.payload(tenant, [{"role": "user", "content": text}])
    depth = 1 if parent else 0
    row = RunRow(
        run_id,
        tenant,
        "helper",
        session_id,
        parent,
        depth,
        spec_ref,
        text,
        "completed",
        f"answer to {text}",
        None,
        0,
        0,
        context_ref,
    )
    return [
        put_spec,
        put_context,
        journal.insert_run(row),
        *journal.begin_step(tenant, run_id, 1, "model", "started", None, 0),
        *journal.finish_step(tenant, run_id, 1, "done", {"text": text}, 0),
        *journal.begin_step(tenant, run_id, 2, "tool", "started", {"name": "look", "args": text}, 0),
        *journal.finish_step(tenant, run_id, 2, "done", COMMON, 0),
        journal.event(tenant, run_id, 1, "token", f'{{"text": "{text}"}}', 0),
    ]


def rows_mentioning(db_path: Path, needles: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Every row of every table of `db_path` whose text contains one of `needles`."""
    found = []
    with sqlite3.connect(db_path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f"SELECT * FROM {table}"):
                text = " ".join(v.decode() if isinstance(v, bytes) else str(v) for v in row)
                if any(n in text for n in needles):
                    found.append((table, row))
    return found


async def test_deleting_a_session_removes_every_row_and_line_of_it(tmp_path: Path) -> None:
    data, jsonl = tmp_path / "data", tmp_path / "jsonl"
    store = SQLiteStore(data, StoreConfig(), jsonl_dir=str(jsonl))
    runs = RunStore(data / "runs.db", schema=SCHEMA, migrate=migrate)
    journal = Journal()
    await store.start()
    await runs.open()
    for sid, text in ((DOOMED, SECRET), (KEPT, "kept words")):
        await store.create_session(SessionRecord(tenant_id="default", session_id=sid))
        await store.commit_message(
            MessageRecord(tenant_id="default", session_id=sid, turn_id=f"t-{sid}", role="user", content=text)
        )
        await runs.write(run_ops(journal, f"run_{sid}", sid, None, text))
        # a child run found by its id alone (session_id NULL), and a grandchild under it
        await runs.write(run_ops(journal, f"run_{sid}.1", None, f"run_{sid}", text))
        await runs.write(run_ops(journal, f"run_{sid}.1.1", None, f"run_{sid}.1", text))
    for sid, text in ((DOOMED, SECRET), (KEPT, "kept words")):  # queued, not awaited: deletion comes after
        store.add_event(
            EventRecord(
                tenant_id="default", session_id=sid, turn_id=f"t-{sid}", type="turn.completed", data={"text": text}
            )
        )
        store.add_message(
            MessageRecord(tenant_id="default", session_id=sid, turn_id=f"t-{sid}", role="assistant", content=text)
        )

    deleted_runs = await runs.apply(lambda db: journal.delete_session_runs(db, "default", DOOMED))
    assert await store.delete_session("default", DOOMED) is True
    assert await store.delete_session("default", DOOMED) is False
    assert await runs.apply(lambda db: journal.delete_session_runs(db, "default", DOOMED)) == []

    assert deleted_runs == [f"run_{DOOMED}", f"run_{DOOMED}.1", f"run_{DOOMED}.1.1"]
    kept_steps = await runs.read(lambda db: journal.load_steps(db, "default", f"run_{KEPT}.1"))
    assert [s.output for s in kept_steps] == [{"text": "kept words"}, COMMON]  # shared payloads stay
    kept_row = await runs.read(lambda db: journal.load_run(db, "default", f"run_{KEPT}"))
    assert kept_row is not None
    assert await runs.read(lambda db: journal.load_payload(db, "default", kept_row.spec_ref)) == SPEC
    await store.close()
    await runs.close()

    for name in ("sessions.db", "events.db", "runs.db"):
        assert rows_mentioning(data / name, (DOOMED, SECRET)) == [], name
        assert rows_mentioning(data / name, (KEPT,)) != [] or name == "runs.db"
    assert rows_mentioning(data / "runs.db", ("kept words",)) != []
    lines = b"".join(p.read_bytes() for p in jsonl.glob("*.jsonl")).decode().splitlines()
    assert lines and all(KEPT in line for line in lines)
    assert not any(DOOMED in p.read_text() or SECRET in p.read_text() for p in jsonl.iterdir())


async def test_deleting_runs_of_another_tenant_or_a_lookalike_id_touches_nothing() -> None:
    runs = RunStore(None, schema=SCHEMA)
    await runs.open()
    journal = Journal()
    await runs.write(run_ops(journal, "run_a", DOOMED, None, "ours"))
    await runs.write(run_ops(journal, "run_t", DOOMED, None, "theirs", tenant="other"))  # same session id
    await runs.write(run_ops(journal, "run_ab", None, None, "lookalike"))  # not a child of run_a: no dot
    await runs.write(run_ops(journal, "run_a-1", None, None, "lookalike"))
    assert await runs.apply(lambda db: journal.delete_session_runs(db, "default", DOOMED)) == ["run_a"]
    left = await runs.read(lambda db: [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY run_id")])
    assert left == ["run_a-1", "run_ab", "run_t"]
    await runs.close()
