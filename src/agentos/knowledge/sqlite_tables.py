"""The statements of `knowledge.db`, each a function of the connection run on the writer's
thread (`SqliteKnowledgeStorage` submits them): one function is one transaction's worth of work,
so what it checks and what it writes cannot be split by another writer. The tables, and why
chunk ids never commit out of order, are in `sqlite_schema`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from agentos.errors import Conflict, NotFound
from agentos.knowledge import records
from agentos.knowledge.records import ChunkBatch, ChunkRow, Collection, DocumentRow

_SELECT_COLLECTION = f"SELECT {records.COLLECTION_COLUMNS} FROM collections"
_SELECT_DOCUMENT = f"SELECT {records.DOCUMENT_COLUMNS} FROM documents"
_PENDING = "status = 'queued' OR (status = 'indexing' AND lease_until_ms < ?)"


# --- collections -------------------------------------------------------------------------


def create_collection(c: Collection, max_per_tenant: int, db: sqlite3.Connection) -> Collection:
    if db.execute("SELECT 1 FROM collections WHERE tenant_id = ? AND name = ?", (c.tenant_id, c.name)).fetchone():
        raise Conflict(f"collection {c.name!r} exists", code="collection_exists")
    (count,) = db.execute("SELECT count(*) FROM collections WHERE tenant_id = ?", (c.tenant_id,)).fetchone()
    if count >= max_per_tenant:
        raise Conflict(f"at most {max_per_tenant} collections per tenant", code="too_many_collections")
    row = (c.collection_id, c.tenant_id, c.name, c.embedding_model, c.dimensions, c.chunk_tokens, c.chunk_overlap)
    db.execute(
        "INSERT INTO collections (collection_id, tenant_id, name, model, dims, chunk_tokens, chunk_overlap,"
        " created_ms, description) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*row, c.created_ms, c.description),
    )
    created = get_collection(c.tenant_id, c.name, db)
    assert created is not None
    return created


def get_collection(tenant_id: str, name: str, db: sqlite3.Connection) -> Collection | None:
    sql = _SELECT_COLLECTION + " WHERE tenant_id = ? AND name = ?"
    row = db.execute(sql, (tenant_id, name)).fetchone()
    return None if row is None else records.collection_row(row)


def list_collections(tenant_id: str, db: sqlite3.Connection) -> list[Collection]:
    sql = _SELECT_COLLECTION + " WHERE tenant_id = ? ORDER BY name"
    return [records.collection_row(r) for r in db.execute(sql, (tenant_id,))]


def delete_collection(tenant_id: str, name: str, db: sqlite3.Connection) -> Collection | None:
    found = get_collection(tenant_id, name, db)
    if found is None:
        return None
    cid = (found.collection_id,)
    db.execute("DELETE FROM chunks WHERE collection_id = ?", cid)  # the trigger empties the FTS rows
    db.execute(
        "DELETE FROM document_content WHERE document_id IN (SELECT document_id FROM documents WHERE collection_id = ?)",
        cid,
    )
    db.execute("DELETE FROM documents WHERE collection_id = ?", cid)
    db.execute("DELETE FROM collections WHERE collection_id = ?", cid)
    return found


# --- documents ---------------------------------------------------------------------------


def insert_document(d: DocumentRow, content: bytes, max_documents: int, db: sqlite3.Connection) -> DocumentRow:
    where = "WHERE collection_id = ? AND tenant_id = ?"
    counted = db.execute(f"SELECT documents FROM collections {where}", (d.collection_id, d.tenant_id)).fetchone()
    if counted is None:
        raise NotFound("collection not found")
    if d.idempotency_key is not None:
        sql = _SELECT_DOCUMENT + " WHERE collection_id = ? AND idempotency_key = ?"
        existing = db.execute(sql, (d.collection_id, d.idempotency_key)).fetchone()
        if existing is not None:
            return records.document_row(existing)
    if counted[0] >= max_documents:
        raise Conflict(f"at most {max_documents} documents per collection", code="too_many_documents")
    row = (d.document_id, d.tenant_id, d.collection_id, d.title, d.content_type, d.size_bytes, d.sha256)
    db.execute(
        f"INSERT INTO documents ({records.DOCUMENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*row, json.dumps(d.metadata), "queued", d.created_ms, d.updated_ms, d.idempotency_key, None, 0, 0),
    )
    db.execute("INSERT INTO document_content (document_id, body) VALUES (?, ?)", (d.document_id, content))
    db.execute("UPDATE collections SET documents = documents + 1 WHERE collection_id = ?", (d.collection_id,))
    found = get_document(d.tenant_id, d.collection_id, d.document_id, db)
    assert found is not None
    return found


def get_document(tenant_id: str, collection_id: str, document_id: str, db: sqlite3.Connection) -> DocumentRow | None:
    sql = _SELECT_DOCUMENT + " WHERE document_id = ? AND collection_id = ? AND tenant_id = ?"
    row = db.execute(sql, (document_id, collection_id, tenant_id)).fetchone()
    return None if row is None else records.document_row(row)


def list_documents(
    tenant_id: str, collection_id: str, limit: int, after: str | None, db: sqlite3.Connection
) -> list[DocumentRow]:
    sql = (
        _SELECT_DOCUMENT + " WHERE collection_id = ? AND tenant_id = ? AND document_id > ? ORDER BY document_id LIMIT ?"
    )
    return [records.document_row(r) for r in db.execute(sql, (collection_id, tenant_id, after or "", limit))]


def delete_document(tenant_id: str, collection_id: str, document_id: str, db: sqlite3.Connection) -> bool:
    found = get_document(tenant_id, collection_id, document_id, db)
    if found is None:
        return False
    db.execute("DELETE FROM chunks WHERE document_id = ?", (document_id,))
    db.execute("DELETE FROM document_content WHERE document_id = ?", (document_id,))
    db.execute("DELETE FROM documents WHERE document_id = ?", (document_id,))
    db.execute(
        "UPDATE collections SET documents = documents - 1, chunks = chunks - ?, deletions = deletions + 1"
        " WHERE collection_id = ?",
        (found.chunks, collection_id),
    )
    return True


# --- the indexer -------------------------------------------------------------------------


def claim_documents(
    owner: str, now_ms: int, lease_ms: int, limit: int, db: sqlite3.Connection
) -> list[tuple[DocumentRow, Collection, bytes]]:
    sql = f"SELECT document_id FROM documents WHERE {_PENDING} ORDER BY created_ms, document_id LIMIT ?"
    ids = [r[0] for r in db.execute(sql, (now_ms, limit))]
    claimed = []
    for document_id in ids:
        db.execute(
            "UPDATE documents SET status = 'indexing', lease_owner = ?, lease_until_ms = ?, attempts = attempts + 1,"
            " updated_ms = ? WHERE document_id = ?",
            (owner, now_ms + lease_ms, now_ms, document_id),
        )
        doc = records.document_row(db.execute(_SELECT_DOCUMENT + " WHERE document_id = ?", (document_id,)).fetchone())
        sql = _SELECT_COLLECTION + " WHERE collection_id = ?"
        collection = records.collection_row(db.execute(sql, (doc.collection_id,)).fetchone())
        (body,) = db.execute("SELECT body FROM document_content WHERE document_id = ?", (document_id,)).fetchone()
        claimed.append((doc, collection, bytes(body)))
    return claimed


def renew_lease(owner: str, document_ids: Sequence[str], until_ms: int, db: sqlite3.Connection) -> None:
    db.execute(
        "UPDATE documents SET lease_until_ms = ? WHERE lease_owner = ? AND status = 'indexing'"
        " AND document_id IN (SELECT value FROM json_each(?))",
        (until_ms, owner, json.dumps(list(document_ids))),
    )


def save_chunks(owner: str, document_id: str, chunks: Sequence[ChunkRow], now_ms: int, db: sqlite3.Connection) -> bool:
    held = db.execute(
        "SELECT collection_id FROM documents WHERE document_id = ? AND lease_owner = ? AND status = 'indexing'",
        (document_id, owner),
    ).fetchone()
    if held is None:
        return False
    (collection_id,) = held
    db.executemany(
        "INSERT INTO chunks (collection_id, document_id, ordinal, text, vector) VALUES (?, ?, ?, ?, ?)",
        [(collection_id, document_id, c.ordinal, c.text, c.vector) for c in sorted(chunks, key=lambda c: c.ordinal)],
    )
    db.execute(
        "UPDATE documents SET status = 'ready', chunks = ?, reason = NULL, lease_owner = NULL, lease_until_ms = NULL,"
        " updated_ms = ? WHERE document_id = ?",
        (len(chunks), now_ms, document_id),
    )
    db.execute("UPDATE collections SET chunks = chunks + ? WHERE collection_id = ?", (len(chunks), collection_id))
    return True


def fail_document(owner: str, document_id: str, reason: str, now_ms: int, db: sqlite3.Connection) -> None:
    db.execute(
        "UPDATE documents SET status = 'failed', reason = ?, lease_owner = NULL, lease_until_ms = NULL,"
        " updated_ms = ? WHERE document_id = ? AND lease_owner = ? AND status = 'indexing'",
        (reason, now_ms, document_id, owner),
    )


# --- queries -----------------------------------------------------------------------------


def vectors_after(collection_id: str, after: int, db: sqlite3.Connection) -> tuple[list[int], list[str], bytes]:
    # Chunks exist only for ready documents (save_chunks writes them with the `ready` status).
    sql = "SELECT chunk_id, document_id, vector FROM chunks WHERE collection_id = ? AND chunk_id > ? ORDER BY chunk_id"
    rows = db.execute(sql, (collection_id, after)).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows], b"".join(r[2] for r in rows)


def chunks_after(collection_id: str, after: int, db: sqlite3.Connection) -> ChunkBatch:
    sql = (
        "SELECT chunk_id, document_id, text, vector FROM chunks WHERE collection_id = ? AND chunk_id > ?"
        " ORDER BY chunk_id"
    )
    rows = db.execute(sql, (collection_id, after)).fetchall()
    return ChunkBatch([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], b"".join(r[3] for r in rows))


def index_version(collection_id: str, db: sqlite3.Connection) -> tuple[int, int]:
    row = db.execute("SELECT deletions FROM collections WHERE collection_id = ?", (collection_id,)).fetchone()
    (top,) = db.execute("SELECT max(chunk_id) FROM chunks WHERE collection_id = ?", (collection_id,)).fetchone()
    return (row[0] if row else 0), (top or 0)


def document_metadata(
    collection_id: str, document_ids: list[str] | None, db: sqlite3.Connection
) -> dict[str, tuple[str, dict[str, Any]]]:
    sql = "SELECT document_id, title, metadata FROM documents WHERE collection_id = ? AND status = 'ready'"
    params: tuple[Any, ...] = (collection_id,)
    if document_ids is not None:
        sql += " AND document_id IN (SELECT value FROM json_each(?))"
        params += (json.dumps(document_ids),)
    return {r[0]: (r[1], json.loads(r[2])) for r in db.execute(sql, params)}


def chunks(collection_id: str, chunk_ids: Sequence[int], db: sqlite3.Connection) -> list[ChunkRow]:
    sql = (
        "SELECT chunk_id, document_id, ordinal, text FROM chunks WHERE collection_id = ?"
        " AND chunk_id IN (SELECT value FROM json_each(?)) ORDER BY chunk_id"
    )
    return [ChunkRow(*r) for r in db.execute(sql, (collection_id, json.dumps([int(i) for i in chunk_ids])))]


def pending(db: sqlite3.Connection) -> int:
    (count,) = db.execute("SELECT count(*) FROM documents WHERE status IN ('queued', 'indexing')").fetchone()
    return int(count)


def next_claim_ms(db: sqlite3.Connection) -> int | None:
    (due,) = db.execute(NEXT_CLAIM).fetchone()
    return None if due is None else int(due)


# What `claim_documents` takes: queued ones now, indexing ones after their lease (`_PENDING`).
NEXT_CLAIM = (
    "SELECT min(CASE WHEN status = 'queued' THEN 0 ELSE lease_until_ms + 1 END) FROM documents"
    " WHERE status IN ('queued', 'indexing')"
)
