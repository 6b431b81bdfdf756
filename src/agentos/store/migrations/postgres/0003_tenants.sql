-- The tenant registry (agentos.tenancy.pg_tables): tenants, their API keys (the keyed hash,
-- never the key) and the check value of the key pepper every node must share.
-- Every node reads all of it into memory at start, then follows changes by LISTEN/NOTIFY.
CREATE TABLE tenants (
    tenant_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    limits JSONB NOT NULL,
    disabled BOOLEAN NOT NULL,
    created_ms BIGINT NOT NULL
);

CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants (tenant_id),
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT,
    revoked_ms BIGINT,
    hash BYTEA NOT NULL
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, key_id);

-- One row per name; 'pepper_check' is a slow keyed hash (scrypt) of the pepper, so a node
-- started with another pepper refuses to start instead of refusing every key.
CREATE TABLE tenancy_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
