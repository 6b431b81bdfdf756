"""Where the tenant registry keeps its rows: the seam between `TenantRegistry` and a database.

The registry serves every request from memory; its storage only has to load every row, write
one row, and (for a database several nodes share) tell the registry about the changes other
nodes made. Two implementations:
- `tables.TenantTables`: `<data_dir>/tenants.db` (SQLite), the embedded default; one node, so
  `follow` has nothing to follow;
- `pg_tables.PgTenantTables`: PostgreSQL (`store.backend = "postgres"`), shared by every node;
  `follow` listens for the other nodes' changes (`agentos.store.pg_follow`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from agentos.tenancy.records import ApiKey, Tenant

Rows = tuple[list[Tenant], list[ApiKey]]


class ChangeSink(Protocol):
    """What a storage calls when rows changed elsewhere (the registry implements it)."""

    async def refresh(self, read: Callable[[], Awaitable[Rows]], *, full: bool) -> None:
        """Await `read()` and take its rows: all there are (`full`), or those that changed.

        The registry reads and applies under the lock its own writes take, so a read that
        started before one of them committed can never overwrite it in memory afterwards.
        """


class RegistryStorage(Protocol):
    async def open(self) -> None:
        """Connect (and create or migrate the tables).

        Raises:
            StoreError: the database cannot be opened.
            ConfigError: (PostgreSQL) unreachable at start-up, or this node's pepper is not the one
                the stored keys were hashed with.
        """

    async def load(self) -> Rows:
        """Every tenant and key. Raises: StoreError."""

    async def put_tenant(self, tenant: Tenant, *, create: bool = False) -> bool:
        """Write the tenant's row; with `create`, only if no row has its id (False: one has).

        Raises: StoreError (StoreUnavailable: the database cannot be reached now).
        """

    async def put_key(self, key: ApiKey) -> None:
        """Write the key's row. Raises: StoreError."""

    async def follow(self, sink: ChangeSink) -> None:
        """Start telling `sink` about changes made by others, until `close`."""

    async def close(self) -> None: ...
