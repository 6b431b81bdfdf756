-- The end user who made a session, a run or a schedule (issue 30): a user's token sees only its
-- own (`Principal.may_see`). NULL: made by a tenant key, seen by tenant-wide principals only.
-- Independent of 0016 (another branch's): applied in version order, it needs nothing from it.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS owner TEXT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner TEXT;
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS owner TEXT;
CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (tenant_id, owner, session_id) WHERE owner IS NOT NULL;
