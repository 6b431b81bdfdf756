"""The durable journal of agent runs: schema, row types, and the statements that write them.

A run is a sequence of steps, numbered from 1 (`seq`):

    kind     status                       input payload             output payload
    model    started -> done              -                         the reply (text, tool calls, usage)
    tool     started -> done | uncertain  the call (id, name, args)  the result given to the model
    human    waiting -> done              the request               the answer

A step's result is committed before the next step starts. Payloads are stored once per
tenant in `payloads`, keyed by the sha256 of the tenant and their canonical JSON, and
referenced from the step. Events (`run_events`) are what `GET /v1/runs/{id}/events` streams;
they are written in the same ordered queue but the loop does not wait for them.

Tenancy: every row carries the `tenant_id` of its run (writes take it from the run's row), and
every read a request can reach names the caller's tenant in its WHERE clause: another tenant's
run reads as missing. Run ids are global, so the updates of a run already admitted (status,
step results) go by run id. The only reads across tenants are the start-up ones
(`open_runs_of_every_tenant`, `agents_of_every_tenant`): recovery resumes each run under the
tenant on its row.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from agentos.journal.deletion import delete_idle_runs, delete_session_runs
from agentos.journal.run_store import Op
from agentos.journal.schema import SCHEMA, migrate
from agentos.kernel import RUN_TERMINAL_SQL, RUN_TERMINAL_STATUSES

__all__ = ["SCHEMA", "TERMINAL", "EventRow", "Journal", "RunRow", "Step", "migrate"]

RunStatus = Literal["queued", "running", "waiting_human", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset(RUN_TERMINAL_STATUSES)
StepKind = Literal["model", "tool", "human", "user"]  # "user": a message steered into the run
StepStatus = Literal["started", "waiting", "done", "uncertain"]

_encoder = msgspec.json.Encoder(order="sorted")


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace: the bytes that hashes are taken of."""
    return _encoder.encode(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments_json: str) -> str:
    """The hash a human approves: sha256 of the canonical form of the tool's JSON arguments."""
    try:
        value = msgspec.json.decode(arguments_json)
    except msgspec.DecodeError:
        return sha256_hex(arguments_json.encode())
    return sha256_hex(canonical_json(value))


# What the API answers of a run, in this order, around `input_truncated` (`RunRow.to_dict`).
_RUN_ANSWER_HEAD = ["run_id", "agent", "session_id", "parent_run_id", "input"]
_RUN_ANSWER_TAIL = ["status", "result", "reason", "created_ms", "updated_ms", "owner"]


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    tenant_id: str
    agent: str
    session_id: str | None
    parent_run_id: str | None
    depth: int
    spec_ref: str
    input: str
    status: str
    result: str | None
    reason: str | None
    created_ms: int
    updated_ms: int
    context_ref: str | None = None  # payload: earlier messages of the session the run continues
    owner: str | None = None  # the end user who started it, or whose session it runs in; None: a tenant key
    forked_from: str | None = None  # a fork (`agentos.agents.forks`): the run it was forked from
    forked_at_seq: int | None = None  # ... and the last step of that run's journal it copied

    def to_dict(self) -> dict[str, Any]:
        """The run as the API answers it (`input` whole: a list cuts it, `run_list`)."""
        head = {name: getattr(self, name) for name in _RUN_ANSWER_HEAD}
        tail = {name: getattr(self, name) for name in _RUN_ANSWER_TAIL}
        return head | {"input_truncated": False} | tail | {"forked_from": self.origin()}

    def origin(self) -> dict[str, Any] | None:
        """`{"run_id", "at_seq"}` of the run this one was forked from; None: not a fork."""
        if self.forked_from is None:
            return None
        return {"run_id": self.forked_from, "at_seq": self.forked_at_seq}


@dataclass(frozen=True, slots=True)
class Step:
    seq: int
    kind: str
    operation_id: str
    status: str
    input: Any
    output: Any
    attempts: int


@dataclass(frozen=True, slots=True)
class EventRow:
    seq: int
    type: str
    data: str  # JSON text
    at_ms: int  # when it was journaled (the row's created_ms)

    def payload(self) -> dict[str, Any]:
        """The event's data as streams show it: the stored JSON with its time, `at_ms`."""
        data: dict[str, Any] = msgspec.json.decode(self.data)
        data["at_ms"] = self.at_ms
        return data


class Journal:
    """Builds the statements (SQLite's; `agentos.journal.postgres.PgJournal` has PostgreSQL's,
    with the same parameters); reads run on the store's thread."""

    PUT_PAYLOAD = "INSERT OR IGNORE INTO payloads (hash, tenant_id, body) VALUES (?, ?, ?)"
    INSERT_RUN = "INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    SET_STATUS = (
        "UPDATE runs SET status = ?, result = coalesce(?, result), reason = coalesce(?, reason), updated_ms = ?"
        " WHERE run_id = ?"
    )
    UPSERT_STEP = (
        "INSERT INTO steps (tenant_id, run_id, seq, kind, operation_id, status, input_ref, updated_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, seq) DO UPDATE SET"
        " status = excluded.status, attempts = attempts + 1, updated_ms = excluded.updated_ms"
    )
    FINISH_STEP = (
        "UPDATE steps SET status = ?, payload_ref = ?, updated_ms = ? WHERE run_id = ? AND seq = ? AND tenant_id = ?"
    )
    INSERT_EVENT = "INSERT OR IGNORE INTO run_events VALUES (?, ?, ?, ?, ?, ?)"
    PUT_AGENT = (
        "INSERT INTO agents VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, name) DO UPDATE SET"
        " spec = excluded.spec, source = excluded.source, updated_ms = excluded.updated_ms"
    )

    # --- writes (lists of statements for RunStore.write / write_nowait) ---

    def payload(self, tenant_id: str, value: Any) -> tuple[str, Op]:
        """The payload's ref and its insert. The tenant is part of the hashed bytes: two tenants'
        equal payloads are two rows, each its tenant's (no row is shared across tenants)."""
        body = canonical_json(value)
        ref = sha256_hex(tenant_id.encode() + b"\0" + body)
        return ref, (self.PUT_PAYLOAD, (ref, tenant_id, body))

    def insert_run(self, row: RunRow) -> Op:
        return (
            self.INSERT_RUN,
            (
                row.run_id,
                row.tenant_id,
                row.agent,
                row.session_id,
                row.parent_run_id,
                row.depth,
                row.spec_ref,
                row.input,
                row.status,
                row.result,
                row.reason,
                row.created_ms,
                row.updated_ms,
                row.context_ref,
                row.owner,
                row.forked_from,
                row.forked_at_seq,
            ),
        )

    def create_run(self, row: RunRow) -> list[Op]:
        """The run's row (on PostgreSQL also its lease, held by this node)."""
        return [self.insert_run(row)]

    def end_run(self, run_id: str, status: str, now_ms: int, *, result: str | None = None, reason: str) -> list[Op]:
        """The run's terminal state (on PostgreSQL its lease goes with it)."""
        return [self.set_status(run_id, status, now_ms, result=result, reason=reason)]

    def set_status(
        self, run_id: str, status: str, now_ms: int, *, result: str | None = None, reason: str | None = None
    ) -> Op:
        return self.SET_STATUS, (status, result, reason, now_ms, run_id)

    def begin_step(
        self, tenant_id: str, run_id: str, seq: int, kind: StepKind, status: StepStatus, input_value: Any, now_ms: int
    ) -> list[Op]:
        """A new step (or a retry of it: `attempts` counts how often it was started)."""
        ref, put = self.payload(tenant_id, input_value) if input_value is not None else (None, None)
        upsert = self.UPSERT_STEP, (tenant_id, run_id, seq, kind, f"{run_id}:{seq}", status, ref, now_ms)
        return [put, upsert] if put is not None else [upsert]

    def finish_step(
        self, tenant_id: str, run_id: str, seq: int, status: StepStatus, output: Any, now_ms: int
    ) -> list[Op]:
        ref, put = self.payload(tenant_id, output)
        return [put, (self.FINISH_STEP, (status, ref, now_ms, run_id, seq, tenant_id))]

    def event(self, tenant_id: str, run_id: str, seq: int, event_type: str, data_json: str, now_ms: int) -> Op:
        return self.INSERT_EVENT, (tenant_id, run_id, seq, event_type, data_json, now_ms)

    def put_agent(self, tenant_id: str, name: str, spec_json: str, source: str, now_ms: int) -> Op:
        return self.PUT_AGENT, (tenant_id, name, spec_json, source, now_ms, now_ms)

    # --- deletion (runs on the store's thread, inside its transaction: `RunStore.apply`) ---

    def delete_session_runs(self, db: sqlite3.Connection, tenant_id: str, session_id: str) -> list[str]:
        """Delete every run of the tenant's session, its children and what only they used
        (`agentos.journal.deletion`); the ids of the deleted runs."""
        return delete_session_runs(db, tenant_id, session_id)

    def delete_idle_runs(self, db: sqlite3.Connection, tenant_id: str, before_ms: int, limit: int) -> list[str]:
        """Delete up to `limit` finished runs outside any session last updated before `before_ms`
        (`agentos.journal.deletion`); the ids of the deleted runs, children included."""
        return delete_idle_runs(db, tenant_id, before_ms, limit)

    # --- reads (run on the store's thread) ---

    def load_run(self, db: sqlite3.Connection, tenant_id: str, run_id: str) -> RunRow | None:
        """The tenant's run; None when there is none (or it is another tenant's)."""
        row = db.execute("SELECT * FROM runs WHERE run_id = ? AND tenant_id = ?", (run_id, tenant_id)).fetchone()
        return RunRow(*row) if row is not None else None

    def open_runs_of_every_tenant(self, db: sqlite3.Connection) -> list[RunRow]:
        """Start-up recovery only (no request reaches it): each row names its run's tenant."""
        rows = db.execute(f"SELECT * FROM runs WHERE status NOT IN {RUN_TERMINAL_SQL} ORDER BY created_ms").fetchall()
        return [RunRow(*r) for r in rows]

    def load_steps(self, db: sqlite3.Connection, tenant_id: str, run_id: str) -> list[Step]:
        rows = db.execute(
            "SELECT s.seq, s.kind, s.operation_id, s.status, i.body, o.body, s.attempts FROM steps s"
            " LEFT JOIN payloads i ON i.hash = s.input_ref AND i.tenant_id = s.tenant_id"
            " LEFT JOIN payloads o ON o.hash = s.payload_ref AND o.tenant_id = s.tenant_id"
            " WHERE s.run_id = ? AND s.tenant_id = ? ORDER BY s.seq",
            (run_id, tenant_id),
        ).fetchall()
        return [Step(r[0], r[1], r[2], r[3], _decode(r[4]), _decode(r[5]), r[6]) for r in rows]

    def load_payload(self, db: sqlite3.Connection, tenant_id: str, ref: str) -> Any:
        row = db.execute("SELECT body FROM payloads WHERE hash = ? AND tenant_id = ?", (ref, tenant_id)).fetchone()
        return _decode(row[0]) if row is not None else None

    def load_events(self, db: sqlite3.Connection, tenant_id: str, run_id: str, after_seq: int) -> list[EventRow]:
        rows = db.execute(
            "SELECT seq, type, data, created_ms FROM run_events WHERE run_id = ? AND tenant_id = ? AND seq > ?"
            " ORDER BY seq",
            (run_id, tenant_id, after_seq),
        ).fetchall()
        return [EventRow(*r) for r in rows]

    def last_event_seq(self, db: sqlite3.Connection, run_id: str) -> int:
        row = db.execute("SELECT max(seq) FROM run_events WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0] or 0)

    def count_children(self, db: sqlite3.Connection, run_id: str) -> int:
        row = db.execute("SELECT count(*) FROM runs WHERE parent_run_id = ?", (run_id,)).fetchone()
        return int(row[0])

    def open_children(self, db: sqlite3.Connection, run_id: str) -> list[str]:
        rows = db.execute(
            f"SELECT run_id FROM runs WHERE parent_run_id = ? AND status NOT IN {RUN_TERMINAL_SQL}",
            (run_id,),
        ).fetchall()
        return [r[0] for r in rows]

    def agents_of_every_tenant(self, db: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
        """Start-up only: (tenant_id, name, spec, source) of every API-defined agent."""
        rows = db.execute("SELECT tenant_id, name, spec, source FROM agents ORDER BY tenant_id, name")
        return [(r[0], r[1], r[2], r[3]) for r in rows.fetchall()]

    def agents_of_tenant(self, db: sqlite3.Connection, tenant_id: str) -> list[tuple[str, str, str, str]]:
        """(tenant_id, name, spec, source) of one tenant's API-defined agents."""
        sql = "SELECT tenant_id, name, spec, source FROM agents WHERE tenant_id = ? ORDER BY name"
        rows = db.execute(sql, (tenant_id,))
        return [(r[0], r[1], r[2], r[3]) for r in rows.fetchall()]


def _decode(body: bytes | None) -> Any:
    return msgspec.json.decode(body) if body is not None else None
