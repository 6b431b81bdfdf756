"""What the run journal says runs spent: the provider tokens of their finished model steps.

A model step's output payload is the reply, with `usage` (`Runner._call_model`). The tokens
quota is seeded from this at start, with the transcripts' usage (`Store.token_usage_since`);
after that, `RunHost.spent` counts each model call as it finishes.
"""

from __future__ import annotations

import sqlite3

from agentos.journal.run_store import RunStore

_MODEL_TOKENS = """SELECT s.tenant_id, SUM(COALESCE(json_extract(CAST(p.body AS TEXT), '$.usage.prompt_tokens'), 0)
+ COALESCE(json_extract(CAST(p.body AS TEXT), '$.usage.completion_tokens'), 0))
FROM steps s JOIN payloads p ON p.hash = s.payload_ref
WHERE s.kind = 'model' AND s.status = 'done' AND s.updated_ms >= ? AND s.updated_ms < ? GROUP BY s.tenant_id"""


async def model_tokens(store: RunStore, since_ms: int, before_ms: int) -> dict[str, int]:
    """Tokens of model steps finished in `[since_ms, before_ms)`, per tenant (one scan of the
    steps, once at start)."""

    def read(db: sqlite3.Connection) -> dict[str, int]:
        return dict(db.execute(_MODEL_TOKENS, (since_ms, before_ms)).fetchall())

    return await store.read(read)
