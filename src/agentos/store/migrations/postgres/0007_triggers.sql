-- Signed webhook triggers (agentos.triggers.pg_storage): the triggers, and every accepted
-- delivery. A delivery's (trigger_id, webhook_id) is its dedup key for the sender's whole retry
-- horizon (rows are pruned only once past it and no longer queued); its run_id is chosen when
-- it is accepted. Deliveries outlive a deleted trigger (their runs are ordinary runs).
-- Independent of 0006 (knowledge): applied in version order, it needs nothing from it.
CREATE TABLE triggers (
    trigger_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    input_template TEXT NOT NULL,
    description TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    secrets JSONB NOT NULL,  -- [[nonce, created_ms, expires_ms], ...] newest first; never the secret
    created_ms BIGINT NOT NULL
);
CREATE INDEX triggers_by_tenant ON triggers (tenant_id, created_ms);

CREATE TABLE trigger_deliveries (
    trigger_id TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    payload BYTEA NOT NULL,
    received_ms BIGINT NOT NULL,
    status TEXT NOT NULL,  -- queued | started | failed
    attempts INTEGER NOT NULL,
    next_attempt_ms BIGINT NOT NULL,
    lease_owner TEXT,  -- the node whose dispatcher claimed it, until lease_until_ms
    lease_until_ms BIGINT,
    reason TEXT,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (trigger_id, webhook_id)
);
CREATE INDEX trigger_deliveries_to_claim ON trigger_deliveries (status, next_attempt_ms);
CREATE INDEX trigger_deliveries_by_trigger ON trigger_deliveries (trigger_id, received_ms);
