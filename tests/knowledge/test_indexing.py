"""The indexer and the service around it, against the real server: a provider that is down
postpones documents instead of failing them; idle indexes leave memory; the agents' search
over several collections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentos.errors import NotFound
from agentos.mock.server import MockServer
from agentos.store.records import DEFAULT_TENANT
from agentos.testing import RunningServer
from tests.knowledge.http import POLL_PAUSE_S, create_collection, query, ready, upload

ServerFactory = Callable[..., Awaitable[RunningServer]]


class FlakyProvider:
    """/v1/embeddings that answers 503 until `healthy`, then passes requests to the mock."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.healthy = False
        self.refused = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self.healthy:
            self.refused.set()
            return web.json_response({"error": {"message": "down for maintenance"}}, status=503)
        async with aiohttp.ClientSession() as http, http.post(f"{self.upstream}/embeddings", data=body) as r:
            return web.Response(body=await r.read(), status=r.status, content_type="application/json")


@pytest.fixture
async def flaky(mock: MockServer) -> AsyncIterator[FlakyProvider]:
    provider = FlakyProvider(mock.url)
    await provider.start()
    yield provider
    await provider.close()


async def _metric(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(f"{url}/metrics") as r:
        line = next(line for line in (await r.text()).splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


async def test_a_provider_that_is_down_postpones_documents_and_never_fails_them(
    backend: dict[str, Any], server_factory: ServerFactory, flaky: FlakyProvider, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(flaky.url, **{"knowledge.embed_retries": 0, **backend})
    url = server.url
    await create_collection(http, url)
    document = await upload(http, url, "Lighthouses guide ships past the rocks at night.")
    await asyncio.wait_for(flaky.refused.wait(), 10)
    async with http.get(f"{url}/v1/collections/docs/documents/{document['document_id']}") as r:
        assert (await r.json())["status"] in ("queued", "indexing")
    assert await _metric(http, url, "agentos_knowledge_backlog") >= 1
    flaky.healthy = True
    done = await ready(http, url, document)
    assert done["reason"] is None
    assert (await query(http, url, "lighthouse ships"))[0]["document_id"] == document["document_id"]
    assert await _metric(http, url, "agentos_knowledge_documents_failed_total") == 0


async def test_an_index_not_queried_for_index_idle_s_leaves_memory(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, **{"knowledge.index_idle_s": 0.2})
    url = server.url
    await create_collection(http, url)
    document = await ready(http, url, await upload(http, url, "Owls hunt at night with silent wings."))
    assert (await query(http, url, "owls"))[0]["document_id"] == document["document_id"]
    assert await _metric(http, url, "agentos_knowledge_index_bytes") > 0
    deadline = time.monotonic() + 10
    while await _metric(http, url, "agentos_knowledge_index_bytes") > 0:
        assert time.monotonic() < deadline, "the idle index was not dropped"
        await asyncio.sleep(POLL_PAUSE_S)
    assert (await query(http, url, "owls"))[0]["document_id"] == document["document_id"]  # loaded again


async def test_the_agents_search_fuses_several_collections_and_names_each_hit_s_collection(
    knowledge_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = knowledge_server.url
    await create_collection(http, url, name="birds")
    await create_collection(http, url, name="fish")
    owl = await ready(
        http, url, await upload(http, url, "Owls hunt mice at night.", collection="birds"), collection="birds"
    )
    trout = await ready(
        http, url, await upload(http, url, "Trout hunt flies in rivers.", collection="fish"), collection="fish"
    )
    service = knowledge_server.services.knowledge
    hits = await service.search(DEFAULT_TENANT, ("birds", "fish"), "hunt", 5)
    assert {(h["collection"], h["document_id"]) for h in hits} == {
        ("birds", owl["document_id"]),
        ("fish", trout["document_id"]),
    }
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    only = await service.search(DEFAULT_TENANT, ("fish",), "owls at night", 5)
    assert {h["collection"] for h in only} == {"fish"}
    with pytest.raises(NotFound):
        await service.search("someone-else", ("birds",), "owls", 5)
