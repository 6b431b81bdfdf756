"""Real `agentos serve` processes. An accepted document is never lost: kill -9 after the 202s of
several uploads that could not be indexed yet (the provider unreachable), then a restart with a
provider that answers indexes every one of them, on both backends. Two nodes on one PostgreSQL
share documents, indexes and deletions."""

from __future__ import annotations

import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from tests.coordination.cluster import node_env, serve_nodes
from tests.e2e.test_process import agentos_process
from tests.knowledge.http import create_collection, query, ready, upload

pytestmark = pytest.mark.slow

# Short leases: on PostgreSQL a dead process's lease is waited out (on SQLite it is taken at once).
CONFIG = "[knowledge]\nlease_s = 2.0\nembed_retries = 0\n"


@pytest.fixture(params=["sqlite", "postgres"])
async def backend_env(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    from tests.postgres import fresh_schema

    async for config in fresh_schema():
        yield node_env(config)


def _refused_url() -> str:
    """A provider URL where nothing listens (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_documents_accepted_before_a_kill_9_are_all_indexed_after_the_restart(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, backend_env: dict[str, str]
) -> None:
    config = tmp_path / "agentos.toml"
    config.write_text(CONFIG)
    common = ("--config", str(config), "--data-dir", str(tmp_path / "data"))
    accepted: list[dict[str, Any]] = []
    async with agentos_process(*common, "--provider-url", _refused_url(), env=backend_env) as (proc, url):
        await create_collection(http, url)
        for i in range(6):
            accepted.append(await upload(http, url, f"Report {i}: the lighthouse keeper number {i} logs storms."))
        for document in accepted:
            async with http.get(f"{url}/v1/collections/docs/documents/{document['document_id']}") as r:
                assert (await r.json())["status"] in ("queued", "indexing")  # not indexed: no provider
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    async with agentos_process(*common, "--provider-url", mock.url, env=backend_env) as (_, url):
        for document in accepted:
            done = await ready(http, url, document)
            assert done["chunks"] >= 1
        hits = await query(http, url, "lighthouse keeper storms", top_k=10)
        assert {h["document_id"] for h in hits} == {d["document_id"] for d in accepted}


async def test_two_nodes_on_postgresql_share_documents_indexes_and_deletions(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, pg: StoreConfig
) -> None:
    """An upload to one node is indexed by whichever node claims it, and found by a query to the
    other; a deletion on one leaves the other's results too (each index follows the store)."""
    async with serve_nodes(2, tmp_path, mock.url, node_env(pg)) as (one, two):
        await create_collection(http, one.url)
        documents = [await upload(http, one.url, f"Ferry timetable {i}: boats cross the bay hourly.") for i in range(4)]
        for document in documents:
            await ready(http, two.url, document)
        found = {h["document_id"] for h in await query(http, two.url, "ferry boats bay", top_k=10)}
        assert found == {d["document_id"] for d in documents}
        async with http.delete(f"{one.url}/v1/collections/docs/documents/{documents[0]['document_id']}") as r:
            assert r.status == 204
        left = {h["document_id"] for h in await query(http, two.url, "ferry boats bay", top_k=10)}
        assert left == {d["document_id"] for d in documents[1:]}
