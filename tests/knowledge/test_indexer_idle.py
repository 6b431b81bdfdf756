"""An idle indexer looks at the store less and less often (`waiting.IdlePoll`, tested in
tests/test_waiting.py), on a real store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentos.config import KnowledgeConfig, Settings
from agentos.knowledge.embeddings import Embedder
from agentos.knowledge.indexer import IDLE_POLL_MAX_S, POLL_S, Indexer
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage


@pytest.fixture
async def indexer(tmp_path: Path) -> AsyncIterator[Indexer]:
    storage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await storage.open()
    embedder = Embedder(Settings())
    yield Indexer(KnowledgeConfig(), storage, embedder, lambda: 1_000, embedded=True)
    await embedder.aclose()
    await storage.close()


async def test_each_empty_look_doubles_the_wait_up_to_the_cap_and_an_add_resets_it(indexer: Indexer) -> None:
    waits = []
    for _ in range(7):
        assert await indexer._claim() is None  # the empty store: nothing to index
        waits.append(indexer._poll.current_s)
    assert waits == [
        2 * POLL_S,
        4 * POLL_S,
        8 * POLL_S,
        IDLE_POLL_MAX_S,
        IDLE_POLL_MAX_S,
        IDLE_POLL_MAX_S,
        IDLE_POLL_MAX_S,
    ]
    indexer.wake()  # a document added on this node
    assert indexer._poll.current_s == POLL_S
