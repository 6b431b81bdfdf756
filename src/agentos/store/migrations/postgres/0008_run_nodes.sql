-- Runs on several nodes (agentos.agents.leases, agentos.agents.cluster):
-- the nodes that serve runs, each renewing its row with its leases, so that the runs of a node
-- that died are spread over the live ones (each claims its share per round, not all of them);
CREATE TABLE run_nodes (
    node TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);
-- and the error of a request the owner refused for good, read by the node that sent it (which
-- then deletes the row): the sender's client gets the owner's 409/422, not a silent no-op.
ALTER TABLE run_requests ADD COLUMN outcome JSONB;
