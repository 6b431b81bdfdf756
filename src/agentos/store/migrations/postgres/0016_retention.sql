-- Retention (docs/deployment.md "Retention") deletes each tenant's oldest access rows in small
-- batches: led by the tenant, then the time, like the ledger's `usage_ledger_by_tenant`.
CREATE INDEX IF NOT EXISTS access_log_by_tenant_time ON access_log (tenant_id, ts_ms);
