"""Knowledge end to end, over HTTP, against the real server and the mock provider's
deterministic /v1/embeddings: upload -> indexed in the background -> found by a query. Every
test runs on both backends (knowledge.db, and PostgreSQL in a fresh schema)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import expect_error
from tests.knowledge.http import DIMS, create_collection, pdf_with_text, query, ready, upload, wait_state

ServerFactory = Callable[..., Awaitable[RunningServer]]
TOKEN = "knowledge-admin-token"

TOPICS = {
    "volcano": "Volcanoes erupt molten lava and ash; magma chambers feed the eruption of a volcano.",
    "violin": "The violin is a string instrument played with a bow; violinists tune four strings.",
    "sourdough": "Sourdough bread rises with a wild yeast starter; bakers feed the starter flour and water.",
    "glacier": "Glaciers are rivers of ice that carve valleys; a glacier moves slowly downhill.",
}
QUERIES = {
    "volcano": "volcano lava eruption",
    "violin": "violin bow strings",
    "sourdough": "sourdough starter yeast",
    "glacier": "glacier ice valleys",
}


async def test_every_document_type_is_indexed_and_found_first(
    knowledge_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = knowledge_server.url
    await create_collection(http, url)
    documents = {
        "volcano": await upload(http, url, TOPICS["volcano"], title="Volcanoes"),
        "violin": await upload(http, url, f"# Violins\n\n{TOPICS['violin']}", content_type="text/markdown"),
        "sourdough": await upload(
            http, url, f"<html><script>var x=1;</script><p>{TOPICS['sourdough']}</p></html>", content_type="text/html"
        ),
        "glacier": await upload(http, url, pdf_with_text(TOPICS["glacier"]), content_type="application/pdf"),
    }
    for document in documents.values():
        assert document["status"] == "queued"
        done = await ready(http, url, document)
        assert done["chunks"] >= 1 and done["reason"] is None
    for topic, document in documents.items():
        results = await query(http, url, QUERIES[topic], top_k=3)
        assert results[0]["document_id"] == document["document_id"], (topic, results)
        assert topic in results[0]["text"].lower()
    assert (await query(http, url, "volcano", top_k=1))[0]["title"] == "Volcanoes"
    async with http.get(f"{url}/v1/collections/docs") as r:
        collection = await r.json()
    assert collection["documents"] == 4 and collection["chunks"] >= 4


async def test_a_filter_applies_inside_the_search_not_after_its_top_k(
    knowledge_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    """Thirty documents match the query well and lack the tag; one matches it badly and has it.
    A filter applied after a top-k would return nothing; inside the search it returns that one."""
    url = knowledge_server.url
    await create_collection(http, url)
    uploaded = [
        await upload(http, url, f"Apples and pears in fruit salad number {i}.", metadata={"team": "red", "n": i})
        for i in range(30)
    ]
    tagged = await upload(http, url, "Quarterly tax filing deadlines.", metadata={"team": "blue"})
    for document in [*uploaded, tagged]:
        await ready(http, url, document)
    unfiltered = await query(http, url, "apples fruit salad", top_k=1)
    assert unfiltered[0]["document_id"] != tagged["document_id"]
    for flt in ({"team": "blue"}, {"team": {"$in": ["blue", "green"]}}):
        results = await query(http, url, "apples fruit salad", top_k=1, filter=flt)
        assert [r["document_id"] for r in results] == [tagged["document_id"]], flt
        assert results[0]["metadata"] == {"team": "blue"}
    several = await query(http, url, "apples fruit salad", top_k=5, filter={"n": {"$in": [3, 4]}})
    assert {r["metadata"]["n"] for r in several} == {3, 4}
    assert await query(http, url, "apples", top_k=5, filter={"team": "nobody"}) == []


async def test_deleting_a_document_or_a_collection_removes_its_chunks(
    knowledge_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = knowledge_server.url
    await create_collection(http, url)
    volcano = await ready(http, url, await upload(http, url, TOPICS["volcano"]))
    violin = await ready(http, url, await upload(http, url, TOPICS["violin"]))
    assert (await query(http, url, "volcano lava"))[0]["document_id"] == volcano["document_id"]
    async with http.delete(f"{url}/v1/collections/docs/documents/{volcano['document_id']}") as r:
        assert r.status == 204
    found = {hit["document_id"] for hit in await query(http, url, "volcano lava", top_k=10)}
    assert found == {violin["document_id"]}
    async with http.get(f"{url}/v1/collections/docs/documents/{volcano['document_id']}") as r:
        await expect_error(r, 404, "document_not_found")
    async with http.delete(f"{url}/v1/collections/docs") as r:
        assert r.status == 204
    async with http.post(f"{url}/v1/collections/docs/query", json={"query": "violin"}) as r:
        await expect_error(r, 404, "collection_not_found")
    await create_collection(http, url)  # the same name again: empty, nothing of the old one
    assert await query(http, url, "violin bow strings", top_k=10) == []


async def test_an_idempotency_key_answers_the_same_document(
    knowledge_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = knowledge_server.url
    await create_collection(http, url)
    first = await upload(http, url, TOPICS["glacier"], idempotency_key="upload-1")
    target = f"{url}/v1/collections/docs/documents"
    body = {"content": TOPICS["glacier"], "content_type": "text/plain"}
    async with http.post(target, json=body, headers={"Idempotency-Key": "upload-1"}) as r:
        assert r.status == 202 and r.headers["Idempotent-Replayed"] == "true"
        assert (await r.json())["document_id"] == first["document_id"]
    other = {"content": TOPICS["violin"], "content_type": "text/plain"}
    async with http.post(target, json=other, headers={"Idempotency-Key": "upload-1"}) as r:
        await expect_error(r, 409, "idempotency_key_reused")
    again = await upload(http, url, TOPICS["glacier"])  # no key: a new document
    assert again["document_id"] != first["document_id"]
    await ready(http, url, first)
    async with http.get(target) as r:
        listed = (await r.json())["data"]
    assert sorted(d["document_id"] for d in listed) == sorted([first["document_id"], again["document_id"]])


async def test_a_tenant_never_sees_another_tenants_collections_documents_or_chunks(
    backend: dict[str, Any], server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, **{"server.api_token": TOKEN, **backend})
    url = server.url
    alice = (await create_tenant_key(url, TOKEN, tenant_id="alice")).headers
    bob = (await create_tenant_key(url, TOKEN, tenant_id="bob")).headers
    await create_collection(http, url, headers=alice)
    await create_collection(http, url, headers=bob)  # the same name, another tenant's
    secret = await ready(
        http, url, await upload(http, url, "alice's secret volcano plans", headers=alice), headers=alice
    )
    mine = await ready(http, url, await upload(http, url, "bob's violin notes", headers=bob), headers=bob)
    hits = await query(http, url, "secret volcano plans", headers=bob, top_k=10)
    assert {h["document_id"] for h in hits} == {mine["document_id"]}
    document = f"{url}/v1/collections/docs/documents/{secret['document_id']}"
    for method in ("GET", "DELETE"):
        async with http.request(method, document, headers=bob) as r:
            await expect_error(r, 404, "document_not_found")
    async with http.get(f"{url}/v1/collections", headers=bob) as r:
        assert [c["collection_id"] for c in (await r.json())["data"]] != []
        assert all(c["documents"] == 1 for c in (await r.json())["data"])
    await create_collection(http, url, name="private", headers=alice)
    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/documents"), ("POST", "/query")):
        async with http.request(method, f"{url}/v1/collections/private{path}", headers=bob, json={"query": "x"}) as r:
            await expect_error(r, 404, "collection_not_found")
    assert (await query(http, url, "secret volcano plans", headers=alice))[0]["document_id"] == secret["document_id"]
    reader = (await create_tenant_key(url, TOKEN, tenant_id="alice", scopes=["knowledge:read"])).headers
    async with http.post(f"{url}/v1/collections/docs/documents", json={"content": "x"}, headers=reader) as r:
        await expect_error(r, 403, "insufficient_scope")


async def test_the_mock_embeds_at_the_pinned_dimensions(
    knowledge_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = knowledge_server.url
    for dims in (7, DIMS, 1536):
        name = f"dims-{dims}"
        made = await create_collection(http, url, name=name, dimensions=dims)
        assert made["dimensions"] == dims and made["embedding_model"] == "mock-embed"
        document = await ready(http, url, await upload(http, url, TOPICS["violin"], collection=name), collection=name)
        assert document["chunks"] >= 1
        assert (await query(http, url, "violin", collection=name))[0]["document_id"] == document["document_id"]


async def _wrong_dimensions_provider() -> tuple[web.AppRunner, str]:
    """A provider that answers every embedding with 3 numbers, whatever was asked (an upstream
    whose model changed under the collection)."""

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]} for i in range(len(texts))]
        return web.json_response({"object": "list", "data": data, "model": body.get("model", "")})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_vectors_of_other_dimensions_fail_the_document_with_a_reason(
    backend: dict[str, Any], server_factory: ServerFactory, http: aiohttp.ClientSession
) -> None:
    runner, provider_url = await _wrong_dimensions_provider()
    try:
        server = await server_factory(provider_url, **backend)
        await create_collection(http, server.url)
        document = await upload(http, server.url, TOPICS["volcano"])
        failed = await wait_state(http, server.url, document["document_id"])
        assert failed["status"] == "failed" and "dimension" in failed["reason"], failed
        async with http.post(f"{server.url}/v1/collections/docs/query", json={"query": "volcano"}) as r:
            await expect_error(r, 502, "embedding_failed")
        async with http.get(f"{server.url}/metrics") as r:
            assert "agentos_knowledge_documents_failed_total 1.0" in await r.text()
    finally:
        await runner.cleanup()


async def test_metrics_count_what_was_indexed(knowledge_server: RunningServer, http: aiohttp.ClientSession) -> None:
    url = knowledge_server.url
    await create_collection(http, url)
    for topic in TOPICS.values():
        await ready(http, url, await upload(http, url, topic))
    await query(http, url, "glacier")
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    assert "agentos_knowledge_documents_indexed_total 4.0" in text
    assert "agentos_knowledge_chunks_indexed_total" in text and "agentos_knowledge_backlog" in text
    index_bytes = next(line for line in text.splitlines() if line.startswith("agentos_knowledge_index_bytes "))
    assert float(index_bytes.split()[1]) >= 4 * DIMS * 4  # four chunks of DIMS float32 at least
