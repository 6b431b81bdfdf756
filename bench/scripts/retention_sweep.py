"""What one retention sweep's search for idle sessions costs the SQLite sessions writer.

`--sessions` sessions of 2 messages each, half of them idle; the sweep's reads
(`Store.idle_sessions`, `--batch` sessions a read, as `[retention] batch_rows`) are timed
twice. Run it small:

    .venv/bin/python bench/scripts/retention_sweep.py --sessions 10000 [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from agentos.config import StoreConfig
from agentos.store.records import MessageRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore

CUTOFF_MS = 1_000_000


async def fill(store: SQLiteStore, sessions: int) -> None:
    for n in range(sessions):
        session_id = f"ses_{n:07d}"
        await store.create_session(SessionRecord(session_id=session_id, tenant_id="default", created_at_ms=10))
        at_ms = 10 if n % 2 else 2 * CUTOFF_MS  # every other session has a message after the cut-off
        for role in ("user", "assistant"):
            store.add_message(
                MessageRecord(
                    tenant_id="default", session_id=session_id, turn_id=f"t{n}", role=role, content="x" * 200,
                    created_at_ms=at_ms,
                )
            )  # fmt: skip


async def sweep(store: SQLiteStore, batch: int) -> tuple[int, int, float]:
    start, after, pages, idle = time.perf_counter(), "", 0, 0
    while after is not None:
        ids, next_after = await store.idle_sessions("default", CUTOFF_MS, after=after, limit=batch)
        pages, idle, after = pages + 1, idle + len(ids), next_after
    return pages, idle, (time.perf_counter() - start) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--dir", default=None, help="where the files go (/dev/shm: without the disk's noise)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = SQLiteStore(Path(tmp), StoreConfig())
        await store.start()
        await fill(store, args.sessions)
        for _ in range(2):
            pages, idle, ms = await sweep(store, args.batch)
            each_us = ms * 1000 / args.sessions
            print(f"{args.sessions} sessions: {pages} reads, {idle} idle, {ms:.1f} ms ({each_us:.1f} us a session)")
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
