"""The config groups of where state lives and what nodes share: `[store]` (SQLite or
PostgreSQL), `[retention]` (how expired data is swept) and `[coordination]` (Redis).
`agentos.config.Settings` holds them; import them from either module."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    synchronous: Literal["off", "normal", "full"] = "normal"
    queue_max_rows: PosInt = 20_000  # per writer; events and access rows beyond it are shed
    batch_max_rows: PosInt = 1000
    linger_ms: NonNegFloat = 2.0  # under load, how long a writer waits for its batch to fill
    # SQLite: how long an idle writer lets a write nobody awaits (access row, event, user
    # message) wait for others, so that they share one wake-up and one commit; 0 wakes it for each
    put_linger_ms: NonNegFloat = 250.0
    busy_timeout_ms: NonNegInt = 5000
    # postgres: sessions, messages, events, access log, tenants and keys, the run journal (docs/deployment.md)
    backend: Literal["sqlite", "postgres"] = "sqlite"
    postgres_url: str = ""  # postgresql://user:password@host:5432/database
    postgres_schema: str = ""  # "": the server's search_path; else this schema (created if missing)
    # per pool; a node has two (the store's, the run journal's), three of min(4, this) (knowledge,
    # triggers, schedules) and three connections of their own: docs/deployment.md "Connections"
    postgres_pool_max: PosInt = 10
    postgres_acquire_timeout_s: PosFloat = 2.0  # a read waits this long for a connection, then fails
    postgres_request_timeout_s: PosFloat = 10.0  # a request waits this long on one store call, then 503


class CoordinationConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What several nodes share (agentos.coordination). Empty `redis_url`: nothing is shared,
    every limit and quota is this process's own."""

    redis_url: str = ""  # redis://host:port/db; needs the `redis` extra
    timeout_s: PosFloat = 0.5  # per Redis call: past it the node falls back to its own limiter
    expected_nodes: PosInt = 1  # while Redis is down each node allows limit / expected_nodes
    key_prefix: str = "agentos:"
    # A provider slot of kernel.concurrency_limit (shared by the nodes) is leased for this long and
    # renewed every third of it: a node that dies gives its slots back within it.
    permit_lease_s: Annotated[float, msgspec.Meta(ge=0.3)] = 10.0
    # store.backend = "postgres": a node owns each of its runs through a lease this long (renewed
    # every third of it); a run whose owner stopped renewing is taken over by another node
    run_lease_s: PosFloat = 15.0
    # store.backend = "postgres" with Redis: a turn queued on (or forwarded to) another node that
    # sends nothing this long is asked after there; no node answering for it ends it `node_lost`
    forward_quiet_s: PosFloat = 15.0


class RetentionConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How expired data is deleted (`agentos.runtime.retention`, docs/deployment.md "Retention").

    How long data is kept is a tenant limit, `retention_s`: `[tenant_limits] retention_s` is the
    server's default (0: forever), a tenant's own row (`/v1/admin/tenants`) overrides it.
    Every `interval_s` the sweeper deletes what outlived it, at most `batch_rows` rows (or
    sessions) per transaction, so that no deletion holds a writer for long."""

    interval_s: PosFloat = 300.0
    batch_rows: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 500
