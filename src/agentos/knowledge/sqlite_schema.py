"""The tables of `knowledge.db` (created at open; the file is new with this version, so there is
no migration yet: a change to them is a `migrate` step of the writer, as for runs.db).

Chunk ids are `INTEGER PRIMARY KEY AUTOINCREMENT`: never reused, and with one writer thread
committed in id order, so an index that loaded up to chunk N misses nothing by loading > N.
The full-text index is an FTS5 table over `chunks` (external content), kept in step by
triggers: a chunk deleted is gone from it in the same transaction.
"""

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
-- collection_id is in the full-text index so that a search walks the collection's postings, not
-- every tenant's (it weighs 0 in the ranking).
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, collection_id, content='chunks', content_rowid='chunk_id'
);
-- How many rows hold each word (the counts bm25 uses): the search leaves out words too common to rank.
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, 'row');
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, collection_id) VALUES (new.chunk_id, new.text, new.collection_id);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, collection_id)
    VALUES ('delete', old.chunk_id, old.text, old.collection_id);
END;
"""
