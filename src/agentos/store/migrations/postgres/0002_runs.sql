-- The run journal (what runs.db holds with the SQLite backend), plus the leases that let several
-- nodes share the runs. Every read a request can reach filters on tenant_id; the indexes those
-- reads use are led by it. Run ids are global: a run's own updates go by its primary key.
CREATE TABLE agents (
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    source TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    session_id TEXT,
    parent_run_id TEXT,
    depth INTEGER NOT NULL,
    spec_ref TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    reason TEXT,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    context_ref TEXT
);
CREATE INDEX runs_by_session ON runs (tenant_id, session_id) WHERE session_id IS NOT NULL;
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE steps (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    status TEXT NOT NULL,
    input_ref TEXT,
    payload_ref TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);
CREATE INDEX steps_by_time ON steps (updated_ms) WHERE kind = 'model' AND status = 'done';

CREATE TABLE payloads (
    tenant_id TEXT NOT NULL,
    hash TEXT NOT NULL,
    body BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, hash)
);

CREATE TABLE run_events (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);

-- One row per unfinished run: the node that runs it, until when (the server's clock, now()),
-- and the epoch that fences its writes (bumped at every takeover). Deleted when the run ends.
CREATE TABLE run_leases (
    run_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX run_leases_by_expiry ON run_leases (expires_at);
CREATE INDEX run_leases_by_owner ON run_leases (owner);

-- Answers, cancels and terminates sent to a node that does not run the run: the owner applies
-- and deletes them (woken by NOTIFY agentos_run_requests); a node that takes a run over applies
-- those left.
CREATE TABLE run_requests (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    body JSONB NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE INDEX run_requests_by_run ON run_requests (run_id, id);
