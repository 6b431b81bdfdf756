"""One contract for both knowledge storages: SQLite (a real `knowledge.db` in tmp_path) and
PostgreSQL (a fresh schema per test, tests/postgres.py) answer every call alike."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentos.errors import Conflict, InvalidInput, NotFound
from agentos.knowledge.records import ChunkRow, Collection, DocumentRow
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from agentos.knowledge.storage import KnowledgeStorage
from tests.postgres import fresh_schema

LEASE = 1000


@pytest.fixture(params=["sqlite", "postgres"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KnowledgeStorage]:
    if request.param == "sqlite":
        s: KnowledgeStorage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
        await s.open()
        yield s
        await s.close()
        return
    from agentos.knowledge.pg_storage import PgKnowledgeStorage

    async for config in fresh_schema():
        pg = PgKnowledgeStorage(config)
        await pg.open()
        yield pg
        await pg.close()


def collection(name: str = "docs", tenant: str = "acme", cid: str | None = None) -> Collection:
    return Collection(
        collection_id=cid or f"col_{tenant}_{name}",
        tenant_id=tenant,
        name=name,
        embedding_model="m",
        dimensions=2,
        chunk_tokens=100,
        chunk_overlap=10,
        created_ms=1,
        description="about",
    )


def document(
    col: Collection, did: str, metadata: dict[str, Any] | None = None, key: str | None = None, at: int = 10
) -> DocumentRow:
    return DocumentRow(
        document_id=did,
        tenant_id=col.tenant_id,
        collection_id=col.collection_id,
        title=f"title {did}",
        content_type="text/plain",
        size_bytes=5,
        sha256="ab" * 32,
        metadata=metadata or {},
        status="queued",
        created_ms=at,
        updated_ms=at,
        idempotency_key=key,
    )


def vec(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


async def indexed(s: KnowledgeStorage, col: Collection, did: str, texts: list[str], **meta: Any) -> None:
    """A document taken through the indexer's path: inserted, claimed, its chunks saved."""
    await s.insert_document(document(col, did, meta), b"body", max_documents=1000)
    claimed = await s.claim_documents("w", 100, LEASE, 10)
    assert [d.document_id for d, _, _ in claimed] == [did]
    chunks = [ChunkRow(0, did, i, text, vec(i, 1)) for i, text in enumerate(texts)]
    assert await s.save_chunks("w", did, chunks, 200)


async def test_collections(storage: KnowledgeStorage) -> None:
    created = await storage.create_collection(collection(), max_per_tenant=2)
    assert created == collection()
    with pytest.raises(Conflict) as exists:
        await storage.create_collection(collection(cid="col_other"), max_per_tenant=2)
    assert exists.value.code == "collection_exists"
    await storage.create_collection(collection("b"), max_per_tenant=2)
    with pytest.raises(Conflict) as many:
        await storage.create_collection(collection("c"), max_per_tenant=2)
    assert many.value.code == "too_many_collections"
    # another tenant: the same name is its own; it neither sees nor deletes acme's
    await storage.create_collection(collection("docs", "beta"), max_per_tenant=2)
    assert [c.name for c in await storage.list_collections("acme")] == ["b", "docs"]
    assert [c.collection_id for c in await storage.list_collections("beta")] == ["col_beta_docs"]
    assert await storage.get_collection("beta", "b") is None
    assert await storage.delete_collection("beta", "b") is None
    deleted = await storage.delete_collection("acme", "b")
    assert deleted is not None and deleted.collection_id == "col_acme_b"
    assert await storage.get_collection("acme", "b") is None
    assert [c.name for c in await storage.list_collections("acme")] == ["docs"]


async def test_insert_document_idempotent_and_limited(storage: KnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    first = await storage.insert_document(document(col, "doc_1", {"team": "a"}, key="k1"), b"one", max_documents=2)
    assert first == document(col, "doc_1", {"team": "a"}, key="k1")
    again = await storage.insert_document(document(col, "doc_9", key="k1"), b"other", max_documents=2)
    assert again == first  # nothing written: the existing row
    await storage.insert_document(document(col, "doc_2"), b"two", max_documents=2)
    with pytest.raises(Conflict) as many:
        await storage.insert_document(document(col, "doc_3"), b"three", max_documents=2)
    assert many.value.code == "too_many_documents"
    # at the limit a repeated key still answers with its row
    assert await storage.insert_document(document(col, "doc_8", key="k1"), b"x", max_documents=2) == first
    got = await storage.get_collection("acme", "docs")
    assert got is not None and got.documents == 2
    assert await storage.get_document("acme", col.collection_id, "doc_9") is None
    assert await storage.get_document("beta", col.collection_id, "doc_1") is None
    assert await storage.pending() == 2
    page = await storage.list_documents("acme", col.collection_id, limit=1, after=None)
    assert [d.document_id for d in page] == ["doc_1"]
    rest = await storage.list_documents("acme", col.collection_id, limit=5, after="doc_1")
    assert [d.document_id for d in rest] == ["doc_2"]
    assert await storage.list_documents("beta", col.collection_id, limit=5, after=None) == []


async def test_nul_in_a_text_field_is_refused_alike(storage: KnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    bad = document(col, "doc_1")
    for field in ("title", "idempotency_key"):
        with pytest.raises(InvalidInput):
            await storage.insert_document(DocumentRow(**{**_fields(bad), field: "a\x00b"}), b"x", max_documents=5)
    assert await storage.pending() == 0


async def test_the_next_claim_is_now_while_queued_then_when_the_first_lease_ends(storage: KnowledgeStorage) -> None:
    assert await storage.next_claim_ms() is None
    col = await storage.create_collection(collection(), max_per_tenant=5)
    await storage.insert_document(document(col, "doc_1", at=1), b"one", max_documents=10)
    await storage.insert_document(document(col, "doc_2", at=2), b"two", max_documents=10)
    assert await storage.next_claim_ms() == 0  # queued: claimable now
    await storage.claim_documents("a", 100, LEASE, 1)
    assert await storage.next_claim_ms() == 0  # doc_2 still queued
    await storage.claim_documents("b", 200, LEASE, 1)
    assert await storage.next_claim_ms() == 100 + LEASE + 1  # a's lease is the first to end
    await storage.renew_lease("a", ["doc_1"], 5000)
    assert await storage.next_claim_ms() == 200 + LEASE + 1
    await storage.fail_document("b", "doc_2", "unreadable", 300)
    assert await storage.next_claim_ms() == 5001
    await storage.fail_document("a", "doc_1", "unreadable", 300)
    assert await storage.next_claim_ms() is None


async def test_claim_lease_expiry_and_renew(storage: KnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    await storage.insert_document(document(col, "doc_1", at=1), b"one", max_documents=10)
    await storage.insert_document(document(col, "doc_2", at=2), b"two", max_documents=10)
    claimed = await storage.claim_documents("a", 100, LEASE, 1)
    assert [(d.document_id, d.status, d.attempts, c.collection_id, body) for d, c, body in claimed] == [
        ("doc_1", "indexing", 1, col.collection_id, b"one")
    ]
    assert [d.document_id for d, _, _ in await storage.claim_documents("b", 100, LEASE, 5)] == ["doc_2"]
    assert await storage.claim_documents("c", 100 + LEASE - 1, LEASE, 5) == []  # both leases hold
    await storage.renew_lease("a", ["doc_1", "doc_2"], 100 + 5 * LEASE)  # doc_2 is b's: untouched
    expired = await storage.claim_documents("c", 100 + LEASE + 1, LEASE, 5)
    assert [(d.document_id, d.attempts) for d, _, _ in expired] == [("doc_2", 2)]
    # b lost doc_2: its chunks are refused; c's are taken
    assert not await storage.save_chunks("b", "doc_2", [ChunkRow(0, "doc_2", 0, "x", vec(1, 0))], 300)
    assert await storage.save_chunks("c", "doc_2", [ChunkRow(0, "doc_2", 0, "x", vec(1, 0))], 300)
    await storage.fail_document("c", "doc_1", "not mine", 300)  # a's: unchanged
    await storage.fail_document("a", "doc_1", "cannot read it", 300)
    doc = await storage.get_document("acme", col.collection_id, "doc_1")
    assert doc is not None and (doc.status, doc.reason, doc.attempts) == ("failed", "cannot read it", 1)
    ready = await storage.get_document("acme", col.collection_id, "doc_2")
    assert ready is not None and (ready.status, ready.chunks, ready.updated_ms) == ("ready", 1, 300)
    assert await storage.pending() == 0
    assert await storage.claim_documents("d", 10**12, LEASE, 5) == []


async def test_chunks_vectors_and_versions(storage: KnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    other = await storage.create_collection(collection("other"), max_per_tenant=5)
    assert await storage.index_version(col.collection_id) == (0, 0)
    await indexed(storage, col, "doc_1", ["alpha", "beta"])
    await indexed(storage, other, "doc_x", ["elsewhere"])
    await indexed(storage, col, "doc_2", ["gamma"])
    ids, docs, vectors = await storage.vectors_after(col.collection_id, 0)
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert docs == ["doc_1", "doc_1", "doc_2"]
    assert vectors == vec(0, 1) + vec(1, 1) + vec(0, 1)
    deletions, top = await storage.index_version(col.collection_id)
    assert (deletions, top) == (0, ids[-1])
    later, _, tail = await storage.vectors_after(col.collection_id, ids[1])
    assert later == [ids[2]] and tail == vec(0, 1)
    batch = await storage.chunks_after(col.collection_id, ids[0])  # what the in-memory indexes load
    assert (batch.chunk_ids, batch.document_ids, batch.texts) == (ids[1:], ["doc_1", "doc_2"], ["beta", "gamma"])
    assert batch.vectors == vec(1, 1) + vec(0, 1)
    rows = await storage.chunks(col.collection_id, [ids[2], ids[0], 999_999])
    assert [(r.chunk_id, r.document_id, r.ordinal, r.text, r.vector) for r in rows] == [
        (ids[0], "doc_1", 0, "alpha", b""),
        (ids[2], "doc_2", 0, "gamma", b""),
    ]
    other_ids, _, _ = await storage.vectors_after(other.collection_id, 0)
    assert await storage.chunks(col.collection_id, other_ids) == []  # another collection's chunk
    assert set(await storage.document_metadata(col.collection_id)) == {"doc_1", "doc_2"}
    # only those asked for, of this collection's ready documents
    assert set(await storage.document_metadata(col.collection_id, ["doc_2", "doc_x", "doc_9"])) == {"doc_2"}
    assert await storage.document_metadata(col.collection_id, []) == {}
    got = await storage.get_collection("acme", "docs")
    assert got is not None and (got.documents, got.chunks) == (2, 3)

    assert not await storage.delete_document("beta", col.collection_id, "doc_1")  # not beta's
    assert await storage.delete_document("acme", col.collection_id, "doc_1")
    assert not await storage.delete_document("acme", col.collection_id, "doc_1")
    assert await storage.index_version(col.collection_id) == (1, ids[-1])
    assert (await storage.vectors_after(col.collection_id, 0))[0] == [ids[2]]
    got = await storage.get_collection("acme", "docs")
    assert got is not None and (got.documents, got.chunks) == (1, 1)
    # a new chunk after a deletion still gets a higher id
    await indexed(storage, col, "doc_3", ["delta"])
    newest, _, _ = await storage.vectors_after(col.collection_id, ids[-1])
    assert len(newest) == 1 and newest[0] > max(ids + other_ids)


async def test_save_chunks_for_a_deleted_document(storage: KnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    await storage.insert_document(document(col, "doc_1"), b"one", max_documents=10)
    assert len(await storage.claim_documents("w", 100, LEASE, 5)) == 1
    assert await storage.delete_document("acme", col.collection_id, "doc_1")
    assert not await storage.save_chunks("w", "doc_1", [ChunkRow(0, "doc_1", 0, "orphan", vec(1, 1))], 200)
    assert await storage.vectors_after(col.collection_id, 0) == ([], [], b"")
    assert await storage.pending() == 0


async def test_delete_collection_cascades(storage: KnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    await indexed(storage, col, "doc_1", ["shared words here"])
    await storage.insert_document(document(col, "doc_2"), b"queued", max_documents=10)
    assert await storage.pending() == 1
    assert await storage.delete_collection("acme", "docs") is not None
    assert await storage.pending() == 0
    assert await storage.get_document("acme", col.collection_id, "doc_1") is None
    assert await storage.vectors_after(col.collection_id, 0) == ([], [], b"")
    assert await storage.document_metadata(col.collection_id) == {}
    # the name is free again, with a new id and nothing in it
    again = await storage.create_collection(collection(cid="col_new"), max_per_tenant=5)
    assert (again.documents, again.chunks) == (0, 0)
    assert (await storage.chunks_after("col_new", 0)).chunk_ids == []


async def test_tenant_isolation(storage: KnowledgeStorage) -> None:
    acme = await storage.create_collection(collection("docs", "acme"), max_per_tenant=5)
    beta = await storage.create_collection(collection("docs", "beta"), max_per_tenant=5)
    await indexed(storage, acme, "doc_a", ["secret plans"])
    await indexed(storage, beta, "doc_b", ["secret recipes"])
    a_ids, _, _ = await storage.vectors_after(acme.collection_id, 0)
    assert (await storage.chunks_after(acme.collection_id, 0)).texts == ["secret plans"]
    assert await storage.get_document("beta", acme.collection_id, "doc_a") is None
    assert await storage.get_document("beta", beta.collection_id, "doc_a") is None
    assert await storage.list_documents("beta", acme.collection_id, limit=10, after=None) == []
    assert not await storage.delete_document("beta", beta.collection_id, "doc_a")
    assert await storage.get_document("acme", acme.collection_id, "doc_a") is not None
    foreign = document(beta, "doc_c")
    with pytest.raises(NotFound):  # a document into another tenant's collection never lands
        await storage.insert_document(DocumentRow(**{**_fields(foreign), "tenant_id": "acme"}), b"x", max_documents=10)
    assert await storage.get_document("acme", beta.collection_id, "doc_c") is None


def _fields(row: DocumentRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__slots__}
