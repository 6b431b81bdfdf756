"""What the quotas are seeded from at start (`agentos.tenancy.quotas`): reads of `sessions.db`
that run once, on the sessions writer's thread, so they need no index of their own."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial

_SESSIONS = "SELECT tenant_id, COUNT(*) FROM sessions GROUP BY tenant_id"
_TOKENS_SINCE = """SELECT tenant_id, SUM(COALESCE(json_extract(usage, '$.prompt_tokens'), 0)
+ COALESCE(json_extract(usage, '$.completion_tokens'), 0)) FROM messages
WHERE usage IS NOT NULL AND created_at_ms >= ? GROUP BY tenant_id"""


def session_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Sessions stored, per tenant."""
    return dict(conn.execute(_SESSIONS).fetchall())


def tokens_since(since_ms: int) -> Callable[[sqlite3.Connection], dict[str, int]]:
    """A reader: provider tokens in the usage of messages written at or after `since_ms`, per tenant."""
    return partial(_tokens_since, since_ms=since_ms)


def _tokens_since(conn: sqlite3.Connection, *, since_ms: int) -> dict[str, int]:
    return dict(conn.execute(_TOKENS_SINCE, (since_ms,)).fetchall())
