-- A tenant's identity providers set over the admin API (issue 30; PUT /v1/admin/tenants/{id}/issuers),
-- beside the config file's: a JSON list of `[[identity.issuers]]` tables. Every node hears of a
-- change as of any tenant change (NOTIFY "t:<tenant_id>").
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS issuers JSONB NOT NULL DEFAULT '[]';
