"""Listing a tenant's runs (`GET /v1/runs`): the query, its cursor, and its one statement.

Newest first: a console shows the latest runs (and, with `status=waiting_human`, the latest
requests of its inbox) on the first page. Run ids are random (`agentos.ids.new_run_id`), so
the order is `(created_ms, run_id)`, descending, and the cursor carries both:
`<created_ms>:<run_id>` of the last run of the page. The next page holds the runs strictly
before it in that order, so a cursor needs no row to exist (a run deleted with its session
since leaves a cursor that still works) and runs started meanwhile never shift a page.

One statement, the same on SQLite and PostgreSQL but for its placeholders: the tenant is in
its WHERE clause (another tenant's runs are never read), and the indexes `runs_by_tenant`,
`runs_by_status` and `runs_by_agent` (tenant first, then the filter, then the order) make a
page an index range scan whatever the number of runs. A waiting run's pending request (what
`POST /v1/runs/{id}/answer` needs) comes in the same row: the input of its waiting human step.
A run's own input comes cut at `INPUT_MAX_CHARS` (in the statement: a page never reads a large
input whole); `GET /v1/runs/{id}` has all of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, get_args

import msgspec

from agentos.errors import InvalidInput
from agentos.journal.journal import RunRow, RunStatus

RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
# The documented form of a cursor; checked with `re.search`, as a JSON Schema validator does.
# 18 digits: any such number fits the 64-bit integers of both databases.
CURSOR_PATTERN = r"^[0-9]{1,18}:.+$"
_CURSOR = re.compile(CURSOR_PATTERN)
# A listed run's input is cut here: inputs go up to kernel.max_input_chars (100,000 by default),
# too much to repeat in every row of a page; GET /v1/runs/{id} has the whole of it.
INPUT_MAX_CHARS = 500
# The run's columns, its input cut in the database (a page never reads a whole large input).
_COLUMNS = (
    "r.run_id, r.tenant_id, r.agent, r.session_id, r.parent_run_id, r.depth, r.spec_ref,"
    f" substr(r.input, 1, {INPUT_MAX_CHARS + 1}), r.status, r.result, r.reason, r.created_ms, r.updated_ms,"
    " r.context_ref, r.owner, r.forked_from, r.forked_at_seq"
)


@dataclass(frozen=True, slots=True)
class RunCursor:
    """Where a page ends: the last run's (created_ms, run_id)."""

    created_ms: int
    run_id: str

    def encode(self) -> str:
        return f"{self.created_ms}:{self.run_id}"

    @classmethod
    def parse(cls, raw: str) -> RunCursor:
        """Raises: InvalidInput: not a cursor this list gave (`<created_ms>:<run_id>`)."""
        if _CURSOR.search(raw) is None:
            raise InvalidInput(f"query parameter 'after' must be a next_cursor of this list, got {raw[:40]!r}")
        created_ms, run_id = raw.split(":", 1)
        return cls(int(created_ms), run_id)


@dataclass(frozen=True, slots=True)
class RunQuery:
    """A page of a tenant's runs: the filters (None: any), where to start, how many."""

    limit: int
    status: str | None = None
    agent: str | None = None
    session_id: str | None = None
    after: RunCursor | None = None
    owner: str | None = None  # only the runs of this end user (`Principal.subject`)


@dataclass(frozen=True, slots=True)
class ListedRun:
    row: RunRow  # its input cut after INPUT_MAX_CHARS + 1 characters (`list_runs_sql`)
    pending: Any  # the waiting human step's request; None unless the run waits for a human

    def to_dict(self) -> dict[str, Any]:
        """As `GET /v1/runs/{id}` shows it, `pending` only while there is one, and the input
        cut at `INPUT_MAX_CHARS` (`input_truncated`)."""
        info = self.row.to_dict()
        if len(self.row.input) > INPUT_MAX_CHARS:
            info["input"], info["input_truncated"] = self.row.input[:INPUT_MAX_CHARS], True
        if self.pending is not None:
            info["pending"] = self.pending
        return info


# The request a waiting run waits on: its (one) waiting human step's input. Evaluated only for
# the waiting rows of the page: the step by its primary key's prefix, then the payload by its
# whole key (a join instead let PostgreSQL scan the tenant's payloads for each row).
_PENDING = (
    "CASE WHEN r.status = 'waiting_human' THEN (SELECT p.body FROM payloads p WHERE p.tenant_id = r.tenant_id"
    " AND p.hash = (SELECT s.input_ref FROM steps s WHERE s.tenant_id = r.tenant_id AND s.run_id = r.run_id"
    " AND s.kind = 'human' AND s.status = 'waiting' ORDER BY s.seq DESC LIMIT 1)) END"
)


def list_runs_sql(tenant_id: str, query: RunQuery, *, numbered: bool = False) -> tuple[str, list[Any]]:
    """The statement and its parameters; `numbered`: PostgreSQL's `$1, $2...` for SQLite's `?`."""
    where = ["r.tenant_id = ?"]
    params: list[Any] = [tenant_id]
    filters = (
        ("status", query.status),
        ("agent", query.agent),
        ("session_id", query.session_id),
        ("owner", query.owner),
    )
    for column, value in filters:
        if value is not None:
            where.append(f"r.{column} = ?")
            params.append(value)
    if query.after is not None:
        where.append("(r.created_ms, r.run_id) < (?, ?)")
        params += [query.after.created_ms, query.after.run_id]
    sql = (
        f"SELECT {_COLUMNS}, {_PENDING} FROM runs r WHERE {' AND '.join(where)}"
        " ORDER BY r.created_ms DESC, r.run_id DESC LIMIT ?"
    )
    params.append(query.limit)
    if numbered:
        marks = iter(range(1, len(params) + 1))
        sql = re.sub(r"\?", lambda _: f"${next(marks)}", sql)
    return sql, params


def listed(rows: list[Any]) -> list[ListedRun]:
    """The rows of `list_runs_sql`: each a run's columns, then its pending request's JSON."""
    return [ListedRun(RunRow(*row[:-1]), _decode(row[-1])) for row in rows]


def next_cursor(page: list[ListedRun], limit: int) -> str | None:
    """The cursor after a full page (None: this page was the last)."""
    if len(page) < limit:
        return None
    last = page[-1].row
    return RunCursor(last.created_ms, last.run_id).encode()


def _decode(body: bytes | None) -> Any:
    return msgspec.json.decode(body) if body is not None else None
