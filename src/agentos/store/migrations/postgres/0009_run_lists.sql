-- GET /v1/runs: a tenant's runs, newest first by (created_ms, run_id), optionally of one status
-- (the console's inbox: waiting_human) or one agent. Each index is led by tenant_id, then the
-- filter, then the order, so a page is one backward range scan however many runs there are.
CREATE INDEX runs_by_tenant ON runs (tenant_id, created_ms, run_id);
CREATE INDEX runs_by_status ON runs (tenant_id, status, created_ms, run_id);
CREATE INDEX runs_by_agent ON runs (tenant_id, agent, created_ms, run_id);
