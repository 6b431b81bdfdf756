"""A SQLite table described once, as data: its `CREATE TABLE` and its insert statement come from
the description, so that a column is named and typed in one place.

Every column is NOT NULL unless it is named in `nullable` (or is the primary key): that is the
rule in every table the SQLite files hold. The PostgreSQL migrations describe the same tables
in PostgreSQL's types (BIGINT, JSONB, BYTEA); a migration once applied never changes, so they
stay SQL files.

    SESSIONS = Table(
        "sessions",
        "session_id TEXT PRIMARY KEY, tenant_id TEXT, agent TEXT, metadata TEXT, created_at_ms INTEGER",
    )
    SESSIONS.create()   # CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, ...);
    script(SESSIONS, "DROP INDEX IF EXISTS sessions_by_agent;")   # a file's whole schema
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Table:
    """`columns`: "name TYPE [DEFAULT ...]", comma-separated, in the table's order; `nullable`:
    the columns that may be NULL; `constraints`: the table's own (`UNIQUE (a, b)`); `indexes`:
    "index_name (columns) [WHERE ...]" each."""

    name: str
    columns: str
    nullable: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(spec.split()[0] for spec in self._specs())

    def create(self) -> str:
        """The `CREATE TABLE IF NOT EXISTS` statement, one column a line, then its indexes'."""
        lines = [self._column(spec) for spec in self._specs()] + list(self.constraints)
        body = ",\n    ".join(lines)
        indexes = [f"CREATE INDEX IF NOT EXISTS {name} ON {self.name} {on};" for name, on in map(_split, self.indexes)]
        return "\n".join([f"CREATE TABLE IF NOT EXISTS {self.name} (\n    {body}\n);", *indexes])

    def insert(self, *, generated: tuple[str, ...] = ()) -> str:
        """`INSERT INTO name (columns) VALUES (?, ...)` of every column but the `generated` ones."""
        names = [c for c in self.column_names if c not in generated]
        return f"INSERT INTO {self.name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"

    def _specs(self) -> list[str]:
        return [spec.strip() for spec in self.columns.split(",")]

    def _column(self, spec: str) -> str:
        name, kind, *rest = spec.split(maxsplit=2)
        if name in self.nullable or "PRIMARY KEY" in spec:
            return spec
        return " ".join([name, kind, "NOT NULL", *rest])


def script(*parts: Table | str) -> str:
    """A schema to run as one script: the tables' statements (`Table.create`) and other
    statements (a `DROP INDEX` of an earlier version), in this order."""
    return "\n".join(p.create() if isinstance(p, Table) else p for p in parts) + "\n"


def _split(index: str) -> tuple[str, str]:
    name, on = index.split(maxsplit=1)
    return name, on
