"""The statements of `PgKnowledgeStorage` (tables of migrations 0006 and 0010) and its row conversions."""

from __future__ import annotations

import json
from typing import Any

from agentos.knowledge.records import DocumentRow

COLLECTION_COLUMNS = (
    "collection_id, tenant_id, name, model, dims, chunk_tokens, chunk_overlap, created_ms, description,"
    " documents, chunks"
)
DOCUMENT_COLUMNS = (
    "document_id, tenant_id, collection_id, title, content_type, size_bytes, sha256, metadata, status,"
    " created_ms, updated_ms, idempotency_key, reason, chunks, attempts"
)
D_COLUMNS = ", ".join(f"d.{c.strip()}" for c in DOCUMENT_COLUMNS.split(","))

# Two-key advisory locks (a key space apart from the migrations' one-key lock): per tenant,
# around counting and creating its collections.
TENANT_LOCK = 0x6B6E  # "kn"
LOCK_TENANT = "SELECT pg_advisory_xact_lock($1, hashtext($2))"

COLLECTION_EXISTS = "SELECT 1 FROM knowledge_collections WHERE tenant_id = $1 AND name = $2"
COUNT_COLLECTIONS = "SELECT count(*) FROM knowledge_collections WHERE tenant_id = $1"
INSERT_COLLECTION = (
    "INSERT INTO knowledge_collections (collection_id, tenant_id, name, model, dims, chunk_tokens, chunk_overlap,"
    f" created_ms, description) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {COLLECTION_COLUMNS}"
)
GET_COLLECTION = f"SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE tenant_id = $1 AND name = $2"
LIST_COLLECTIONS = f"SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE tenant_id = $1 ORDER BY name"
DELETE_COLLECTION = (  # cascades to its documents, their content and chunks
    f"DELETE FROM knowledge_collections WHERE tenant_id = $1 AND name = $2 RETURNING {COLLECTION_COLUMNS}"
)
COLLECTIONS_BY_ID = f"SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE collection_id = ANY($1)"

# The collection's row lock: inserts, deletions and chunk saves of one collection take it first
# (then the document's), so a collection's counters stay exact and its chunk ids commit in order.
LOCK_COLLECTION = (
    "SELECT documents FROM knowledge_collections WHERE collection_id = $1 AND tenant_id = $2 FOR NO KEY UPDATE"
)
LOCK_COLLECTION_BY_ID = "SELECT 1 FROM knowledge_collections WHERE collection_id = $1 FOR NO KEY UPDATE"
BY_IDEMPOTENCY_KEY = (
    f"SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents WHERE collection_id = $1 AND idempotency_key = $2"
)
INSERT_DOCUMENT = (
    f"INSERT INTO knowledge_documents ({DOCUMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb,"
    f" 'queued', $9, $10, $11, NULL, 0, 0) RETURNING {DOCUMENT_COLUMNS}"
)
INSERT_CONTENT = "INSERT INTO knowledge_content (document_id, body) VALUES ($1, $2)"
COUNT_DOCUMENT = "UPDATE knowledge_collections SET documents = documents + 1 WHERE collection_id = $1"
GET_DOCUMENT = (
    f"SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents"
    " WHERE document_id = $1 AND collection_id = $2 AND tenant_id = $3"
)
LIST_DOCUMENTS = (
    f"SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents WHERE collection_id = $1 AND tenant_id = $2"
    " AND document_id > $3 ORDER BY document_id LIMIT $4"
)
DELETE_DOCUMENT = (  # cascades to its content and chunks
    "DELETE FROM knowledge_documents WHERE document_id = $1 AND collection_id = $2 AND tenant_id = $3 RETURNING chunks"
)
UNCOUNT_DOCUMENT = (
    "UPDATE knowledge_collections SET documents = documents - 1, chunks = chunks - $2, deletions = deletions + 1"
    " WHERE collection_id = $1"
)

CLAIM = f"""WITH picked AS (
    SELECT document_id FROM knowledge_documents
    WHERE status = 'queued' OR (status = 'indexing' AND lease_until_ms < $2)
    ORDER BY created_ms, document_id LIMIT $4 FOR UPDATE SKIP LOCKED
)
UPDATE knowledge_documents d SET status = 'indexing', lease_owner = $1, lease_until_ms = $2 + $3,
    attempts = d.attempts + 1, updated_ms = $2
FROM picked WHERE d.document_id = picked.document_id
RETURNING {D_COLUMNS}"""
CONTENTS = "SELECT document_id, body FROM knowledge_content WHERE document_id = ANY($1)"
RENEW = (
    "UPDATE knowledge_documents SET lease_until_ms = $3 WHERE lease_owner = $1 AND status = 'indexing'"
    " AND document_id = ANY($2)"
)
DOCUMENT_COLLECTION = "SELECT collection_id FROM knowledge_documents WHERE document_id = $1"
MARK_READY = (
    "UPDATE knowledge_documents SET status = 'ready', chunks = $3, reason = NULL, lease_owner = NULL,"
    " lease_until_ms = NULL, updated_ms = $4 WHERE document_id = $1 AND lease_owner = $2 AND status = 'indexing'"
)
INSERT_CHUNK = (
    "INSERT INTO knowledge_chunks (collection_id, document_id, ordinal, text, vector) VALUES ($1, $2, $3, $4, $5)"
)
COUNT_CHUNKS = "UPDATE knowledge_collections SET chunks = chunks + $2 WHERE collection_id = $1"
FAIL = (
    "UPDATE knowledge_documents SET status = 'failed', reason = $3, lease_owner = NULL, lease_until_ms = NULL,"
    " updated_ms = $4 WHERE document_id = $2 AND lease_owner = $1 AND status = 'indexing'"
)

VECTORS_AFTER = (
    "SELECT chunk_id, document_id, vector FROM knowledge_chunks WHERE collection_id = $1 AND chunk_id > $2"
    " ORDER BY chunk_id"
)
CHUNKS_AFTER = (
    "SELECT chunk_id, document_id, text, vector FROM knowledge_chunks WHERE collection_id = $1 AND chunk_id > $2"
    " ORDER BY chunk_id"
)
INDEX_VERSION = (
    "SELECT (SELECT deletions FROM knowledge_collections WHERE collection_id = $1),"
    " (SELECT max(chunk_id) FROM knowledge_chunks WHERE collection_id = $1)"
)
DOCUMENT_METADATA = (
    "SELECT document_id, title, metadata FROM knowledge_documents WHERE collection_id = $1 AND status = 'ready'"
)
DOCUMENTS_METADATA = DOCUMENT_METADATA + " AND document_id = ANY($2)"
CHUNKS = (
    "SELECT chunk_id, document_id, ordinal, text FROM knowledge_chunks WHERE collection_id = $1"
    " AND chunk_id = ANY($2) ORDER BY chunk_id"
)
PENDING = "SELECT count(*) FROM knowledge_documents WHERE status IN ('queued', 'indexing')"


def document_params(d: DocumentRow) -> tuple[Any, ...]:
    """INSERT_DOCUMENT's parameters."""
    return (
        d.document_id,
        d.tenant_id,
        d.collection_id,
        d.title,
        d.content_type,
        d.size_bytes,
        d.sha256,
        json.dumps(d.metadata),
        d.created_ms,
        d.updated_ms,
        d.idempotency_key,
    )
