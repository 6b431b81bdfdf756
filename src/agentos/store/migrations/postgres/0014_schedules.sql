-- Schedules (agentos.schedules.pg_storage): a schedule's cursor is the first slot no node has
-- decided yet; each decided slot is a row of schedule_fires under the unique key
-- (schedule_id, slot_ms), inserted before its run starts, so no slot fires twice across nodes
-- and crashes. Independent of 0013 (another branch's): applied in version order, it needs
-- nothing from it.
CREATE TABLE schedules (
    schedule_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    input TEXT NOT NULL,
    cron TEXT,  -- five cron fields in zone; NULL: an every_s schedule
    zone TEXT NOT NULL,
    every_s INTEGER,
    max_runs_in_flight INTEGER NOT NULL,
    overlap TEXT NOT NULL,  -- skip | queue
    misfire TEXT NOT NULL,  -- skip | run_once
    paused BOOLEAN NOT NULL,
    created_ms BIGINT NOT NULL,
    cursor_ms BIGINT NOT NULL
);
CREATE INDEX schedules_by_tenant ON schedules (tenant_id, created_ms);
CREATE INDEX schedules_due ON schedules (paused, cursor_ms);

CREATE TABLE schedule_fires (
    schedule_id TEXT NOT NULL,
    slot_ms BIGINT NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,  -- pending | started | finished | skipped | failed
    updated_ms BIGINT NOT NULL,
    reason TEXT,
    lease_owner TEXT,  -- pending: the node starting it, until lease_until_ms; then the node that started it
    lease_until_ms BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (schedule_id, slot_ms)
);
CREATE INDEX schedule_fires_to_claim ON schedule_fires (status, lease_until_ms);
