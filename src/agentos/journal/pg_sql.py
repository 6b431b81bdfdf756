"""The longer reads and the deletion of the run journal on PostgreSQL (migration 0002's tables)."""

from __future__ import annotations

STEPS = """SELECT s.seq, s.kind, s.operation_id, s.status, i.body, o.body, s.attempts FROM steps s
LEFT JOIN payloads i ON i.tenant_id = s.tenant_id AND i.hash = s.input_ref
LEFT JOIN payloads o ON o.tenant_id = s.tenant_id AND o.hash = s.payload_ref
WHERE s.run_id = $1 AND s.tenant_id = $2 ORDER BY s.seq"""

_TOKENS = "COALESCE((convert_from(p.body, 'UTF8')::jsonb #>> '{usage,%s}')::bigint, 0)"
MODEL_TOKENS = f"""SELECT s.tenant_id, SUM({_TOKENS % "prompt_tokens"} + {_TOKENS % "completion_tokens"})
FROM steps s JOIN payloads p ON p.tenant_id = s.tenant_id AND p.hash = s.payload_ref
WHERE s.kind = 'model' AND s.status = 'done' AND s.updated_ms >= $1 AND s.updated_ms < $2 GROUP BY s.tenant_id"""

# One statement, so one transaction. A child run's id is its parent's followed by `.n`. Every
# part of a statement sees the rows as they were before it, so a payload goes only when no run
# or step outside the doomed ones refers to it (payloads are shared by hash within a tenant).
_DOOMED = "run_id IN (SELECT run_id FROM doomed)"
DELETE_SESSION_RUNS = f"""WITH doomed AS (
  SELECT r.run_id FROM runs r WHERE r.tenant_id = $1 AND (r.session_id = $2 OR EXISTS (
    SELECT 1 FROM runs p WHERE p.tenant_id = $1 AND p.session_id = $2 AND starts_with(r.run_id, p.run_id || '.')))
), refs AS (
  SELECT spec_ref AS ref FROM runs WHERE {_DOOMED}
  UNION SELECT context_ref FROM runs WHERE {_DOOMED}
  UNION SELECT input_ref FROM steps WHERE tenant_id = $1 AND {_DOOMED}
  UNION SELECT payload_ref FROM steps WHERE tenant_id = $1 AND {_DOOMED}
), gone_events AS (DELETE FROM run_events WHERE tenant_id = $1 AND {_DOOMED}
), gone_steps AS (DELETE FROM steps WHERE tenant_id = $1 AND {_DOOMED}
), gone_leases AS (DELETE FROM run_leases WHERE {_DOOMED}
), gone_requests AS (DELETE FROM run_requests WHERE {_DOOMED}
), gone_payloads AS (DELETE FROM payloads d WHERE d.tenant_id = $1 AND d.hash IN (SELECT ref FROM refs)
  AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.tenant_id = $1 AND NOT x.{_DOOMED}
                  AND (x.spec_ref = d.hash OR x.context_ref = d.hash))
  AND NOT EXISTS (SELECT 1 FROM steps x WHERE x.tenant_id = $1 AND NOT x.{_DOOMED}
                  AND (x.input_ref = d.hash OR x.payload_ref = d.hash))
), gone_runs AS (DELETE FROM runs WHERE {_DOOMED} RETURNING run_id)
SELECT run_id FROM gone_runs"""
