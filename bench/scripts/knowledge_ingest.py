"""The knowledge storages' ingest alone: wall and CPU time to save a collection's chunks through
`insert_document`, `claim_documents` and `save_chunks` (the indexer's writes, embeddings computed
in process), on `knowledge.db` or PostgreSQL, with whatever `agentos` is first on PYTHONPATH
(so the same command times two versions of the code: PYTHONPATH=/tmp/before/src:$PWD for one).

    .venv/bin/python bench/scripts/knowledge_ingest.py --chunks 20000 --backend sqlite|postgres

The corpus and the batches are `agentos_bench.micro.fts`'s (`fill`: documents of 20 chunks of 60
Zipf-drawn words, 256-dimension mock embeddings, 50 documents at a time). CPU time is this
process's only: with PostgreSQL the server's work (a `tsvector` and its GIN index entries before
migration 0010) shows in the wall time alone. PostgreSQL: a schema of its own, dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import tempfile
import time
from pathlib import Path

from agentos.knowledge.records import Collection
from agentos.knowledge.storage import KnowledgeStorage
from agentos_bench.micro.fts import DIMS, MODEL, TENANT, fill

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


async def timed_fill(storage: KnowledgeStorage, chunks: int, seed: int) -> tuple[float, float]:
    await storage.open()
    try:
        spec = Collection(f"col_{secrets.token_hex(4)}", TENANT, "bench", MODEL, DIMS, 400, 50, 1, "")
        collection = await storage.create_collection(spec, max_per_tenant=10)
        began, began_cpu = time.perf_counter(), time.process_time()
        await fill(storage, collection, chunks, seed)
        return time.perf_counter() - began, time.process_time() - began_cpu
    finally:
        await storage.close()


async def run(backend: str, chunks: int, seed: int) -> tuple[float, float]:
    if backend == "sqlite":
        from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage

        with tempfile.TemporaryDirectory() as folder:
            return await timed_fill(SqliteKnowledgeStorage(Path(folder) / "knowledge.db"), chunks, seed)
    import asyncpg

    from agentos.config import StoreConfig
    from agentos.knowledge.pg_storage import PgKnowledgeStorage

    schema = f"bench_ingest_{secrets.token_hex(4)}"
    config = StoreConfig(backend="postgres", postgres_url=PG_URL, postgres_schema=schema)
    try:
        return await timed_fill(PgKnowledgeStorage(config), chunks, seed)
    finally:
        admin = await asyncpg.connect(PG_URL)
        try:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    wall, cpu = asyncio.run(run(args.backend, args.chunks, args.seed))
    print(f"{args.backend}: {args.chunks} chunks saved in {wall:.2f} s wall, {cpu:.2f} s CPU"
          f" ({args.chunks / wall:.0f} chunks/s); load average before {load}")  # fmt: skip


if __name__ == "__main__":
    main()
