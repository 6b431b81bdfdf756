"""Tenants, their API keys, and what a caller may do: the trust boundary's data.

`principal.Principal` is who a request acts for (set on every request by the auth middleware);
`limits.TenantLimits` is what a tenant may consume; `keys` is the key format and its keyed hash;
`registry.TenantRegistry` holds every tenant and key in memory, persisted through a
`storage.RegistryStorage`: `tenants.db` (`tables`), or PostgreSQL shared by every node
(`pg_tables`, following the other nodes' changes with `agentos.store.pg_follow`), with the hash keyed by the
`pepper`.
"""
