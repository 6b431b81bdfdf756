-- Knowledge (agentos.knowledge.pg_storage; what knowledge.db holds with the SQLite backend):
-- collections, their documents (with the content as uploaded, kept until the document is
-- deleted so it can be indexed again), and the documents' chunks with their vectors (float32
-- little-endian bytes, searched in memory: pgvector is not required) and full-text vectors.
-- Deleting a collection or a document cascades to everything under it in the same statement.
CREATE TABLE knowledge_collections (
    collection_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    chunk_tokens INTEGER NOT NULL,
    chunk_overlap INTEGER NOT NULL,
    created_ms BIGINT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    documents INTEGER NOT NULL DEFAULT 0,
    chunks BIGINT NOT NULL DEFAULT 0,
    deletions BIGINT NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, name)
);

CREATE TABLE knowledge_documents (
    document_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    collection_id TEXT NOT NULL REFERENCES knowledge_collections (collection_id) ON DELETE CASCADE,
    title TEXT NOT NULL,
    content_type TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    metadata JSONB NOT NULL,
    status TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    idempotency_key TEXT,
    reason TEXT,
    chunks INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until_ms BIGINT,
    UNIQUE (collection_id, idempotency_key)
);
CREATE INDEX knowledge_documents_by_collection ON knowledge_documents (collection_id, document_id);
-- The indexer's backlog: small, whatever the number of documents indexed.
CREATE INDEX knowledge_documents_pending ON knowledge_documents (created_ms) WHERE status IN ('queued', 'indexing');

CREATE TABLE knowledge_content (
    document_id TEXT PRIMARY KEY REFERENCES knowledge_documents (document_id) ON DELETE CASCADE,
    body BYTEA NOT NULL
);

CREATE TABLE knowledge_chunks (
    chunk_id BIGSERIAL PRIMARY KEY,
    collection_id TEXT NOT NULL,
    document_id TEXT NOT NULL REFERENCES knowledge_documents (document_id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BYTEA NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
);
CREATE INDEX knowledge_chunks_by_collection ON knowledge_chunks (collection_id, chunk_id);
CREATE INDEX knowledge_chunks_by_document ON knowledge_chunks (document_id);
CREATE INDEX knowledge_chunks_tsv ON knowledge_chunks USING GIN (tsv);
