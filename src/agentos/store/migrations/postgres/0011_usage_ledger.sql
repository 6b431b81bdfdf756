-- The usage ledger (agentos.store.ledger): one row per model call that answered, written on the
-- store's `ledger` lane. `cost` is NULL when the target has no price (none is ever invented).
-- GET /v1/usage sums a tenant's rows over a range of at_ms (the first index), or every
-- tenant's for an admin (the second).
CREATE TABLE usage_ledger (
    tenant_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    run_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    model TEXT NOT NULL,
    target TEXT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost DOUBLE PRECISION,
    at_ms BIGINT NOT NULL
);
CREATE INDEX usage_ledger_by_tenant ON usage_ledger (tenant_id, at_ms);
CREATE INDEX usage_ledger_by_time ON usage_ledger (at_ms);
