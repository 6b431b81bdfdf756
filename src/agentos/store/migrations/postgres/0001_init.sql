-- Sessions, transcripts, turn events and the access log (the SQLite files' tables, one database).
-- Every read filters on tenant_id, and every index those reads use is led by it.
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    metadata JSONB NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX sessions_by_tenant ON sessions (tenant_id, session_id);

CREATE TABLE messages (
    message_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    usage JSONB,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (turn_id, role)
);
CREATE INDEX messages_by_tenant ON messages (tenant_id, session_id, message_id);
CREATE INDEX messages_by_time ON messages (created_at_ms) WHERE usage IS NOT NULL;

CREATE TABLE events (
    event_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data JSONB NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX events_by_tenant ON events (tenant_id, session_id, event_id);

CREATE TABLE access_log (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    ts_ms BIGINT NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    status INTEGER NOT NULL,
    duration_ms DOUBLE PRECISION NOT NULL,
    remote TEXT NOT NULL,
    key_id TEXT NOT NULL DEFAULT ''
);
