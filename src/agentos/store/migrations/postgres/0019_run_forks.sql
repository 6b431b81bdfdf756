-- A fork (POST /v1/runs/{run_id}/fork, docs/agents.md "Forks"): the run it was forked from and
-- the last step of that run's journal it copied. NULL: not a fork.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS forked_from TEXT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS forked_at_seq INTEGER;
