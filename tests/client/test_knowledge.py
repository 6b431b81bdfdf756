"""Knowledge through the client against the real server on loopback: a collection, documents
as text and as bytes (a PDF, sent as base64), their state polled to `ready`, a query with a
filter, an idempotent upload, typed 404s; the blocking `Client` for the same calls."""

from __future__ import annotations

import asyncio

import pytest

from agentos.client import APIError, AsyncClient, Client, Document
from agentos.testing import RunningServer, eventually
from tests.knowledge.http import DIMS, pdf_with_text


async def _ready(client: AsyncClient, document: Document) -> Document:
    async def done() -> bool:
        return (await client.get_document(document.collection, document.document_id)).status == "ready"

    await eventually(done, timeout_s=30, what=f"document {document.document_id} to be indexed")
    return await client.get_document(document.collection, document.document_id)


async def test_a_collection_its_documents_and_a_filtered_query(server: RunningServer) -> None:
    async with AsyncClient(server.url) as client:
        made = await client.create_collection("docs", "mock-embed", DIMS, description="the handbook")
        assert made.name == "docs" and made.dimensions == DIMS and made.documents == 0
        text = await client.add_document(
            "docs", "Volcanoes erupt lava and ash.", title="Volcanoes", metadata={"team": "red"}
        )
        assert text.status == "queued" and text.title == "Volcanoes"
        pdf = await client.add_document(
            "docs", pdf_with_text("Glaciers carve ice valleys."), "application/pdf", metadata={"team": "blue"}
        )
        for document in (text, pdf):
            assert (await _ready(client, document)).chunks >= 1
        (hit,) = await client.query("docs", "glacier ice", top_k=1)
        assert hit.document_id == pdf.document_id and "glacier" in hit.text.lower()
        (only,) = await client.query("docs", "glacier ice", top_k=1, filter={"team": "red"})
        assert only.document_id == text.document_id and only.title == "Volcanoes"  # filtered inside the search

        replay = await client.add_document("docs", "Volcanoes erupt lava and ash.", idempotency_key="k1")
        again = await client.add_document("docs", "Volcanoes erupt lava and ash.", idempotency_key="k1")
        assert again.document_id == replay.document_id  # the first upload's document (its state now)
        listed = (await client.list_documents("docs", limit=10)).data
        assert {d.document_id for d in listed} == {text.document_id, pdf.document_id, replay.document_id}
        assert [c.name for c in (await client.list_collections()).data] == ["docs"]

        await client.delete_document("docs", pdf.document_id)
        with pytest.raises(APIError) as gone:
            await client.get_document("docs", pdf.document_id)
        assert gone.value.status == 404
        await client.delete_collection("docs")
        with pytest.raises(APIError) as no_collection:
            await client.query("docs", "anything")
        assert no_collection.value.status == 404 and no_collection.value.code == "collection_not_found"


def _blocking(url: str) -> tuple[str, int, str]:
    with Client(url) as client:
        client.create_collection("notes", "mock-embed", DIMS)
        document = client.add_document("notes", "# Sourdough\n\nstarter and yeast", "text/markdown")
        with pytest.raises(APIError) as conflict:
            client.create_collection("notes", "mock-embed", DIMS)
        return document.status, client.get_collection("notes").documents, conflict.value.code


async def test_the_blocking_client_makes_a_collection_and_uploads(server: RunningServer) -> None:
    status, documents, code = await asyncio.to_thread(_blocking, server.url)
    assert status == "queued" and documents == 1 and code == "collection_exists"
