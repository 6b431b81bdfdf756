"""The tables of `knowledge.db` (created at open) and its migrations (`migrate`, run by the
writer after the schema at every open, as for runs.db).

Chunk ids are `INTEGER PRIMARY KEY AUTOINCREMENT`: never reused, and with one writer thread
committed in id order, so an index that loaded up to chunk N misses nothing by loading > N.

Versions (`PRAGMA user_version`): 0, the first, also kept an FTS5 index over `chunks` (the
`chunks_fts` table, its `chunks_vocab` view and two triggers that wrote every chunk's words into
it); 1 drops them: the service searches its in-memory `TextIndex` (built from `chunks.text`), so
the FTS5 index was written with every chunk and read by nothing.
"""

import sqlite3

VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    collection_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    chunk_tokens INTEGER NOT NULL,
    chunk_overlap INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    documents INTEGER NOT NULL DEFAULT 0,
    chunks INTEGER NOT NULL DEFAULT 0,
    deletions INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, name)
);
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    collection_id TEXT NOT NULL,
    title TEXT NOT NULL,
    content_type TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    idempotency_key TEXT,
    reason TEXT,
    chunks INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until_ms INTEGER,
    UNIQUE (collection_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS documents_by_collection ON documents (collection_id, document_id);
CREATE INDEX IF NOT EXISTS documents_pending ON documents (created_ms) WHERE status IN ('queued', 'indexing');
-- Kept until the document is deleted: a document can be indexed again (another model, a crash).
CREATE TABLE IF NOT EXISTS document_content (document_id TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id INTEGER PRIMARY KEY AUTOINCREMENT,
    collection_id TEXT NOT NULL,
    document_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_collection ON chunks (collection_id, chunk_id);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks (document_id);
"""

# 0 -> 1: without the FTS5 index. One transaction: a crash leaves version 0, and the next open
# drops again (every statement is IF EXISTS).
_DROP_FULL_TEXT = """
BEGIN IMMEDIATE;
DROP TRIGGER IF EXISTS chunks_fts_insert;
DROP TRIGGER IF EXISTS chunks_fts_delete;
DROP TABLE IF EXISTS chunks_vocab;
DROP TABLE IF EXISTS chunks_fts;
PRAGMA user_version = 1;
COMMIT;
"""


def migrate(db: sqlite3.Connection) -> None:
    """Bring a `knowledge.db` of an earlier version to `VERSION` (a new file: only numbers it)."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version < 1:
        db.executescript(_DROP_FULL_TEXT)
