"""`knowledge.db` of version 0 (with the FTS5 index that nothing reads any more) opened by this
version: the index, its vocabulary view and its triggers are dropped, the chunks stay, and
writing and deleting chunks works without them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentos.knowledge.sqlite_storage import SCHEMA, VERSION, SqliteKnowledgeStorage
from tests.knowledge.test_storage import collection, indexed

# What version 0 added to SCHEMA (as it shipped): the FTS5 index over the chunks and its triggers.
_VERSION_0_FULL_TEXT = """
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, collection_id, content='chunks', content_rowid='chunk_id'
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, 'row');
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, collection_id) VALUES (new.chunk_id, new.text, new.collection_id);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, collection_id)
    VALUES ('delete', old.chunk_id, old.text, old.collection_id);
END;
"""
_FULL_TEXT_OBJECTS = "SELECT name FROM sqlite_master WHERE name LIKE 'chunks_fts%' OR name = 'chunks_vocab'"


def _inspect(path: Path) -> tuple[int, set[str], list[str]]:
    """(user_version, full-text objects, chunk texts)."""
    db = sqlite3.connect(path)
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        objects = {r[0] for r in db.execute(_FULL_TEXT_OBJECTS)}
        texts = [r[0] for r in db.execute("SELECT text FROM chunks ORDER BY chunk_id")]
    finally:
        db.close()
    return version, objects, texts


async def test_a_version_0_file_loses_its_full_text_index_and_keeps_its_chunks(tmp_path: Path) -> None:
    path = tmp_path / "knowledge.db"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA + _VERSION_0_FULL_TEXT)
    col = collection()
    db.execute(
        "INSERT INTO collections (collection_id, tenant_id, name, model, dims, chunk_tokens, chunk_overlap, created_ms,"
        " documents, chunks) VALUES (?, ?, ?, 'm', 2, 100, 10, 1, 1, 2)",
        (col.collection_id, col.tenant_id, col.name),
    )
    db.execute(
        "INSERT INTO documents (document_id, tenant_id, collection_id, title, content_type, size_bytes, sha256,"
        " metadata, status, created_ms, updated_ms, chunks) VALUES ('doc_1', ?, ?, 't', 'text/plain', 1, '0', '{}',"
        " 'ready', 1, 1, 2)",
        (col.tenant_id, col.collection_id),
    )
    db.executemany(
        "INSERT INTO chunks (collection_id, document_id, ordinal, text, vector) VALUES (?, 'doc_1', ?, ?, x'')",
        [(col.collection_id, 0, "kafka consumer lag"), (col.collection_id, 1, "vacuum")],
    )
    db.commit()
    (indexed_rows,) = db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'kafka OR vacuum'").fetchone()
    db.close()
    assert indexed_rows == 2  # version 0's triggers wrote both chunks into its index
    version, objects, texts = _inspect(path)
    assert (version, texts) == (0, ["kafka consumer lag", "vacuum"])
    assert {"chunks_fts", "chunks_vocab", "chunks_fts_insert", "chunks_fts_delete"} <= objects

    for _ in range(2):  # a second open finds version 1: nothing to do
        storage = SqliteKnowledgeStorage(path)
        await storage.open()
        await storage.close()
        assert _inspect(path) == (VERSION, set(), ["kafka consumer lag", "vacuum"])
    storage = SqliteKnowledgeStorage(path)
    await storage.open()
    try:
        await indexed(storage, col, "doc_2", ["postgres"])
        assert await storage.delete_document("acme", col.collection_id, "doc_1")
        assert (await storage.chunks_after(col.collection_id, 0)).texts == ["postgres"]
    finally:
        await storage.close()


async def test_a_new_file_is_the_latest_version_without_a_full_text_index(tmp_path: Path) -> None:
    storage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await storage.open()
    await storage.close()
    assert _inspect(tmp_path / "knowledge.db") == (VERSION, set(), [])
