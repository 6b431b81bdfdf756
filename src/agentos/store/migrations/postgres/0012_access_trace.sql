-- The access log names each request's trace (issue 28, [telemetry]): '' for an untraced request.
ALTER TABLE access_log ADD COLUMN IF NOT EXISTS trace_id TEXT NOT NULL DEFAULT '';
