"""The usage ledger's rows: one per model call that answered, and the totals read back from them.

Theory of operation. The router hands each call's `Spend` to the `Ledger` (`agentos.tenancy.ledger`
turns it into a `UsageRow`), which the store queues on its own durable writer lane (`Store.record_usage`:
never blocks, never shed, committed in batches with the other rows queued in the same few
milliseconds). `Store.usage_totals(UsageQuery)` sums the rows in `[from_ms, to_ms)` of one tenant
(or of every tenant: the admin's reading), grouped by any of `GROUPS`.

The statements are built here for both SQL stores (`?` or `$n` placeholders); the grouped
columns come only from `GROUPS`, never from the caller's text. `totals()` is the same reading in
Python over a list of rows: the memory store's, a verified fake of the SQL one (the store
contract suite runs all three).

A row's `cost` is NULL when the target has no price: no price is ever invented. A total's `cost`
is then None too, and `unpriced_calls` says how many of its calls had none; a total without any
unpriced call sums the costs exactly as stored (floating point, in the currency of the prices).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, get_args

import msgspec

GroupName = Literal["tenant", "key", "agent", "run", "session", "model", "target", "day"]
GROUP_NAMES: tuple[GroupName, ...] = get_args(GroupName)
DAY_MS = 86_400_000
# What each group reads; `day` is the UTC day number (formatted as YYYY-MM-DD in the answer).
GROUPS: dict[GroupName, str] = {
    "tenant": "tenant_id",
    "key": "key_id",
    "agent": "agent",
    "run": "run_id",
    "session": "session_id",
    "model": "model",
    "target": "target",
    "day": f"at_ms / {DAY_MS}",
}

_COLUMNS = (
    "tenant_id, key_id, agent, run_id, session_id, model, target,"
    " prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens, cost, at_ms"
)
INSERT_SQLITE = f"INSERT INTO usage_ledger ({_COLUMNS}) VALUES ({', '.join('?' * 13)})"
INSERT_PG = f"INSERT INTO usage_ledger ({_COLUMNS}) VALUES ({', '.join(f'${n}' for n in range(1, 14))})"
# The table's one definition, in PostgreSQL's migrations; SQLite runs the same statements.
LEDGER_MIGRATION = "0011_usage_ledger.sql"


def sqlite_schema() -> str:
    """`ledger.db`'s schema: the PostgreSQL migration's own statements (their types are SQLite's
    too: BIGINT is an integer, DOUBLE PRECISION a real), made safe to run at every start. One
    definition of the table for both stores."""
    sql = resources.files("agentos.store.migrations.postgres").joinpath(LEDGER_MIGRATION).read_text(encoding="utf-8")
    return sql.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ").replace(
        "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS "
    )


_SUMS = (
    "COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),"
    " COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), SUM(cost), COUNT(*) - COUNT(cost)"
)


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One model call that answered. Empty strings: the call was for nobody in that field (a
    plain session's call has no run, a call over the open loopback API no key)."""

    tenant_id: str
    key_id: str = ""
    agent: str = ""
    run_id: str = ""
    session_id: str = ""
    model: str
    target: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None  # None: the target has no price
    at_ms: int

    def params(self) -> tuple[Any, ...]:
        """The insert statements' parameters, in `_COLUMNS` order."""
        return (
            self.tenant_id,
            self.key_id,
            self.agent,
            self.run_id,
            self.session_id,
            self.model,
            self.target,
            self.prompt_tokens,
            self.completion_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cost,
            self.at_ms,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageQuery:
    """Which rows to sum and how to group them.

    Args:
        tenant_id: the tenant whose rows; None: every tenant's (only an admin asks this).
        group_by: the groups, in the order the totals are sorted by; empty: one total.
        from_ms: the first millisecond counted (inclusive).
        to_ms: the first millisecond not counted (exclusive).
        limit: the most totals answered.
    """

    tenant_id: str | None
    group_by: tuple[GroupName, ...] = ()
    from_ms: int
    to_ms: int
    limit: int = 10_000


class UsageTotal(msgspec.Struct, kw_only=True):
    """The calls of one group and what they used. The group's fields are there when grouped by."""

    tenant: str | msgspec.UnsetType = msgspec.UNSET
    key: str | msgspec.UnsetType = msgspec.UNSET
    agent: str | msgspec.UnsetType = msgspec.UNSET
    run: str | msgspec.UnsetType = msgspec.UNSET
    session: str | msgspec.UnsetType = msgspec.UNSET
    model: str | msgspec.UnsetType = msgspec.UNSET
    target: str | msgspec.UnsetType = msgspec.UNSET
    day: str | msgspec.UnsetType = msgspec.UNSET  # YYYY-MM-DD, UTC
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: float | None  # None when any call of the group had no price (see unpriced_calls)
    unpriced_calls: int  # calls whose target had no price: counted in tokens only


def select_totals(query: UsageQuery, placeholder: Callable[[int], str]) -> tuple[str, list[Any]]:
    """The statement (and its parameters) that sums `query`'s rows; `placeholder(n)` writes the
    n-th parameter's marker (`?` for SQLite, `$n` for PostgreSQL)."""
    columns = [GROUPS[name] for name in query.group_by]
    params: list[Any] = [query.from_ms, query.to_ms]
    where = f"at_ms >= {placeholder(1)} AND at_ms < {placeholder(2)}"
    if query.tenant_id is not None:
        params.append(query.tenant_id)
        where += f" AND tenant_id = {placeholder(3)}"
    sql = f"SELECT {', '.join([*columns, _SUMS])} FROM usage_ledger WHERE {where}"
    if columns:
        listed = ", ".join(columns)
        sql += f" GROUP BY {listed} ORDER BY {listed}"
    return f"{sql} LIMIT {int(query.limit)}", params


def totals_from_rows(query: UsageQuery, rows: Iterable[Sequence[Any]]) -> list[UsageTotal]:
    """The totals a `select_totals` statement answered (group values first, then the sums)."""
    found = []
    for row in rows:
        width = len(query.group_by)
        calls, prompt, completion, read, write, cost, unpriced = row[width:]
        if not calls:
            continue  # no group: an empty range sums to one row of NULLs and zeros
        group = {name: _shown(name, value) for name, value in zip(query.group_by, row[:width], strict=True)}
        found.append(
            UsageTotal(
                **group,
                calls=int(calls),
                prompt_tokens=int(prompt),
                completion_tokens=int(completion),
                cache_read_tokens=int(read),
                cache_write_tokens=int(write),
                cost=None if unpriced else float(cost or 0.0),
                unpriced_calls=int(unpriced),
            )
        )
    return found


def totals(query: UsageQuery, rows: Iterable[UsageRow]) -> list[UsageTotal]:
    """`query` read over rows in memory, exactly as the SQL stores read it."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        if not query.from_ms <= row.at_ms < query.to_ms:
            continue
        if query.tenant_id is not None and row.tenant_id != query.tenant_id:
            continue
        key = tuple(row.at_ms // DAY_MS if name == "day" else getattr(row, _FIELDS[name]) for name in query.group_by)
        # as _SUMS: calls, the four token counts, the sum of the known costs, the calls without one
        sums = groups.setdefault(key, [0, 0, 0, 0, 0, None, 0])
        counts = (1, row.prompt_tokens, row.completion_tokens, row.cache_read_tokens, row.cache_write_tokens)
        for i, n in enumerate(counts):
            sums[i] += n
        if row.cost is None:
            sums[6] += 1
        else:
            sums[5] = (sums[5] or 0.0) + row.cost
    ordered = sorted(groups.items())[: query.limit]
    return totals_from_rows(query, [(*key, *sums) for key, sums in ordered])


# The row's field each group reads (`day` is derived from `at_ms`).
_FIELDS = {name: column for name, column in GROUPS.items() if name != "day"}


def _shown(name: GroupName, value: Any) -> str:
    if name == "day":
        return day_of(int(value) * DAY_MS)
    return str(value)


def day_of(at_ms: int) -> str:
    """The UTC day of an epoch millisecond, as YYYY-MM-DD."""
    return datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC).date().isoformat()
