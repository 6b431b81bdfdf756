"""The knowledge bench's run: mock, server, the three phases, one report dict.

1. API ingest (server A): upload documents, wait until every one is ready: documents and
   chunks per second with the embedding (through the mock over HTTP) included.
2. Fill (server stopped): the 10k- and 100k-chunk collections filled in process through the
   same storage (`agentos_bench.micro.knowledge_fill`): ingest with the embedding excluded; the index built in process
   for its size (`VectorIndex.nbytes`) and its recall against exact float64 search.
3. Queries (server B): per collection, the first query (which loads the index: the server's
   RSS before and after), warm-up, then measured queries with and without a metadata
   filter, one at a time; the hits' recall@10 against exact search on the same embeddings.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.processes import BenchSetupError, Child, free_port, stop_child, wait_ready
from agentos_bench.knowledge import client
from agentos_bench.knowledge.corpus import Corpus
from agentos_bench.knowledge.metrics import rate
from agentos_bench.knowledge.plan import (
    CHUNK_OVERLAP,
    CHUNK_TOKENS,
    TENANT,
    WORDS_PER_DOCUMENT,
    KnowledgePlan,
    collection_name,
    server_config,
    write_config,
)
from agentos_bench.micro.knowledge_measure import fill_phase, query_phase

_READY_TIMEOUT_S = 120.0


async def start_server(config: Path, data_dir: Path, mock_url: str, log_path: Path) -> Child:
    port = free_port()
    argv = [sys.executable, "-m", "agentos", "serve", "--config", str(config), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--data-dir", str(data_dir), "--provider-url", mock_url]
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL)
    child = Child(name="server", process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    if not await wait_ready(child, _READY_TIMEOUT_S):
        await stop_child(process)
        raise BenchSetupError(f"server not ready in {_READY_TIMEOUT_S}s (see {str(log_path)!r})")
    return child


async def api_phase(plan: KnowledgePlan, url: str, corpus: Corpus) -> dict[str, Any]:
    """Phase 1, and the empty collections of phase 2."""
    async with aiohttp.ClientSession() as http:
        await client.create_collection(http, url, "ingest", plan.dimensions, CHUNK_TOKENS, CHUNK_OVERLAP)
        documents = list(corpus.documents(plan.api_documents, WORDS_PER_DOCUMENT, start=10_000_000))
        seconds = await client.ingest(http, url, "ingest", documents, plan.api_concurrency, plan.ingest_timeout_s)
        chunks = int((await client.collection(http, url, "ingest"))["chunks"])
        for size in plan.sizes:
            await client.create_collection(
                http, url, collection_name(size), plan.dimensions, CHUNK_TOKENS, CHUNK_OVERLAP
            )
    return {
        "method": "POST /v1/collections/ingest/documents (JSON, concurrency "
        f"{plan.api_concurrency}), then GET each document until ready; the clock runs from the first upload to "
        "the last document seen ready (polled every 50 ms); embeddings through the mock provider over HTTP",
        "documents": len(documents),
        "chunks": chunks,
        "seconds": round(seconds, 3),
        "documents_per_s": rate(len(documents), seconds),
        "chunks_per_s": rate(chunks, seconds),
    }


async def run_knowledge(plan: KnowledgePlan, work_dir: Path) -> dict[str, Any]:
    from agentos.config import settings_from_dict
    from agentos.mock.server import MockSettings
    from agentos_bench.common.mock_process import start_mock_process

    schema = f"bench_knowledge_{secrets.token_hex(4)}"
    config = write_config(plan, work_dir, schema)
    data_dir, log = work_dir / "data", work_dir / "server.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = settings_from_dict({**server_config(plan, schema), "data_dir": str(data_dir)})
    corpus = Corpus(plan.seed)
    load_before = os.getloadavg()[0]  # other work on the machine moves every number here
    mock = await start_mock_process(MockSettings(ttft_ms=0, tokens=1), work_dir)
    try:
        server = await start_server(config, data_dir, mock.url, log)
        try:
            ingest = await api_phase(plan, server.url, corpus)
        finally:
            await stop_child(server.process)
        truths = await fill_phase(plan, settings, data_dir, corpus)
        server = await start_server(config, data_dir, mock.url, log)
        try:
            queries = await query_phase(plan, server, truths)
        finally:
            await stop_child(server.process)
    finally:
        await stop_child(mock.process)
        if plan.backend == "postgres":
            await _drop_schema(plan.postgres_url, schema)
    load = {"before_1m": round(load_before, 2), "after_1m": round(os.getloadavg()[0], 2)}
    return {
        "ingest_api": ingest,
        "collections": [truths[s].summary() for s in plan.sizes],
        "queries": queries,
        "load_average": load,
    }


async def _drop_schema(url: str, schema: str) -> None:
    import asyncpg  # the postgres extra; the bench reached here only with it

    with contextlib.suppress(OSError, asyncpg.PostgresError):
        connection = await asyncpg.connect(url, timeout=5)
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()


__all__ = ["TENANT", "run_knowledge"]
