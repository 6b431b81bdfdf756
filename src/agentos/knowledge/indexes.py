"""The in-memory indexes of the collections being queried, kept current with the store.

Each collection has two: its vectors (`VectorIndex`, exact cosine) and its full text
(`TextIndex`, exact BM25), holding the same chunks (loaded together by `chunks_after`). The store
stays the only durable copy: an index is rebuilt from it at a collection's first query after a
start, so nothing here needs saving and nothing the store accepted is missing from it.

An index is loaded at a collection's first query (`chunks_after(0)`), then queries ask the
store for its version (`index_version`: deletions, highest chunk id; at most every `FRESH_S`):
new chunks are appended; a changed deletion count drops the chunks of the documents that are
no longer in the store (read from it, not guessed), without reloading the rest.
So every node's index follows the shared store, whichever node indexed or deleted.

With the index, the titles and metadata of the collection's ready documents are held, read
after the vectors (a document's metadata never changes; it becomes ready in the same
transaction as its chunks): the vector search evaluates a filter on them, as a mask inside the
search, and the hits carry them. Only the documents of newly loaded chunks are read (while a
collection is being filled, a query does not read the whole collection's metadata again); all
of them only after deletions. The documents a filter allows are kept per filter until the
documents change (`allowed`), so a repeated filter is not evaluated on every document again.

Concurrency: on the event loop, a search and an append cannot interleave. A large index is
searched and appended in a thread (numpy releases the GIL there), always under the entry's
lock; a small one is searched on the loop only while that lock is free.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from collections.abc import Collection as Collect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentos.knowledge import filters
from agentos.knowledge.records import ChunkBatch, Collection
from agentos.knowledge.storage import KnowledgeStorage

if TYPE_CHECKING:  # both need numpy, imported with the first collection used: a server that
    import numpy as np  # never searches never loads it (~16 MB of RSS)

    from agentos.knowledge.index import VectorIndex
    from agentos.knowledge.text_index import TextIndex

T = TypeVar("T")

LARGE = 20_000  # rows from which searches and appends leave the event loop
LARGE_BATCH = 500  # chunks from which an append leaves the event loop (tokenizing them takes a while)
# Queries within this long of the last look at the store's version use the index as it is: a
# document that became ready shows up at most this late; one this node deleted at once
# (`invalidate`); one deleted elsewhere at once too, since hits are read from the store, which
# no longer has its chunks (the vector search may then return fewer candidates, never its text).
FRESH_S = 0.1
MAX_FILTERS = 64  # filters whose allowed documents are kept per collection


@dataclass(slots=True)
class IndexEntry:
    collection_id: str
    index: VectorIndex
    text: TextIndex = field(default_factory=lambda: _text_index())
    deletions: int = -1
    loaded_to: int = 0  # the highest chunk id the store reported when last loaded
    documents: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # id -> (title, metadata)
    filtered: dict[str, frozenset[str]] = field(default_factory=dict)  # filter key -> the documents it allows
    indexed: set[str] = field(default_factory=set)  # the documents with chunks in `index`
    used: float = 0.0
    checked: float = -FRESH_S  # when the store's version was last asked (monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _text_index() -> TextIndex:
    from agentos.knowledge.text_index import TextIndex

    return TextIndex()


class IndexCache:
    def __init__(self, storage: KnowledgeStorage, idle_s: float) -> None:
        self._storage = storage
        self._idle_s = idle_s
        self._entries: dict[str, IndexEntry] = {}

    @property
    def nbytes(self) -> int:
        return sum(entry.index.nbytes + entry.text.nbytes for entry in self._entries.values())

    async def current(self, collection: Collection) -> IndexEntry:
        """The collection's entry, brought up to the store's current version."""
        entry = self._entries.get(collection.collection_id)
        if entry is None:  # a collection id is never reused: its dimensions never change
            from agentos.knowledge.index import VectorIndex

            entry = IndexEntry(collection.collection_id, VectorIndex(collection.dimensions))
            self._entries[collection.collection_id] = entry
        entry.used = time.monotonic()
        if entry.used - entry.checked < FRESH_S:
            return entry
        async with entry.lock:
            entry.checked = time.monotonic()
            await self._refresh(entry, collection.dimensions)
        return entry

    def invalidate(self, collection_id: str) -> None:
        """This node deleted from the collection: its next query asks the store at once."""
        entry = self._entries.get(collection_id)
        if entry is not None:
            entry.checked = -FRESH_S

    async def _refresh(self, entry: IndexEntry, dimensions: int) -> None:
        deletions, highest = await self._storage.index_version(entry.collection_id)
        if deletions != entry.deletions:  # documents were removed: drop their chunks
            _set_documents(entry, await self._storage.document_metadata(entry.collection_id))
            gone = entry.indexed - entry.documents.keys()
            if gone:
                await _remove(entry, gone)
                entry.indexed -= gone
            entry.deletions = deletions
        if highest > entry.loaded_to or entry.loaded_to == 0:
            batch = await self._storage.chunks_after(entry.collection_id, entry.index.last_chunk_id)
            if batch.chunk_ids:
                await _append(entry, batch, dimensions)
                entry.indexed.update(batch.document_ids)
                await self._read_documents(entry, set(batch.document_ids))
            entry.loaded_to = max(highest, entry.index.last_chunk_id)

    async def _read_documents(self, entry: IndexEntry, document_ids: set[str]) -> None:
        """Add the metadata of those of `document_ids` not held yet (read after their chunks)."""
        new = sorted(d for d in document_ids if d not in entry.documents)  # a keys() difference walks them all
        if new:
            found = await self._storage.document_metadata(entry.collection_id, new)
            _set_documents(entry, entry.documents | found)

    async def reload_documents(self, entry: IndexEntry, document_ids: set[str]) -> None:
        """Read these documents (full-text hits named them: they became ready just now)."""
        async with entry.lock:
            await self._read_documents(entry, document_ids)

    async def search(
        self, entry: IndexEntry, query: np.ndarray, k: int, documents: Collect[str] | None
    ) -> list[tuple[int, float]]:
        return await _searched(entry, len(entry.index), lambda: entry.index.search(query, k, documents))

    async def search_text(
        self, entry: IndexEntry, terms: list[str], k: int, documents: Collect[str] | None
    ) -> list[tuple[int, float]]:
        """The full-text search (`TextIndex.search`), like `search`."""
        return await _searched(entry, len(entry.text), lambda: entry.text.search(terms, k, documents))

    async def search_both(
        self, entry: IndexEntry, query: np.ndarray, terms: list[str], k: int, documents: Collect[str] | None
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """`search` and `search_text` in one go: one thread and one hold of the lock, not two
        (the two would take the lock one after the other anyway)."""
        return await _searched(entry, len(entry.index), lambda: _both(entry, query, terms, k, documents))

    def drop(self, collection_id: str) -> None:
        self._entries.pop(collection_id, None)

    def sweep(self) -> int:
        """Drop the indexes not used for `knowledge.index_idle_s`; how many were dropped."""
        cutoff = time.monotonic() - self._idle_s
        idle = [cid for cid, entry in self._entries.items() if entry.used < cutoff and not entry.lock.locked()]
        for cid in idle:
            del self._entries[cid]
        return len(idle)


def _set_documents(entry: IndexEntry, documents: dict[str, tuple[str, dict[str, Any]]]) -> None:
    entry.documents = documents
    entry.filtered = {}  # what a filter allows is worked out again for these documents


def allowed(entry: IndexEntry, parsed: filters.Filter) -> frozenset[str]:
    """The documents of `entry` whose metadata passes the (parsed, non-empty) filter, kept until
    the entry's documents change. The key tells `True` from `1` (equal in Python, not here)."""
    key = repr(sorted((k, [(type(v).__name__, v) for v in values]) for k, values in parsed.items()))
    found = entry.filtered.get(key)
    if found is None:
        if len(entry.filtered) >= MAX_FILTERS:
            entry.filtered.clear()
        found = entry.filtered[key] = frozenset(
            doc for doc, (_, meta) in entry.documents.items() if filters.matches(meta, parsed)
        )
    return found


def _both(
    entry: IndexEntry, query: np.ndarray, terms: list[str], k: int, documents: Collect[str] | None
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    nearest = entry.index.search(query, k, documents)
    return nearest, (entry.text.search(terms, k, documents) if terms else [])


def _remove_now(entry: IndexEntry, documents: set[str]) -> None:
    entry.index.remove_documents(documents)
    entry.text.remove_documents(documents)


async def _remove(entry: IndexEntry, documents: set[str]) -> None:
    if len(entry.index) >= LARGE:
        await asyncio.to_thread(_remove_now, entry, documents)
    else:
        _remove_now(entry, documents)


def _append_now(entry: IndexEntry, batch: ChunkBatch, dimensions: int) -> None:
    import numpy as np

    vectors = np.frombuffer(batch.vectors, dtype="<f4").reshape(len(batch.chunk_ids), dimensions)
    entry.index.add(batch.chunk_ids, batch.document_ids, vectors)
    entry.text.add(batch.chunk_ids, batch.document_ids, batch.texts)


async def _append(entry: IndexEntry, batch: ChunkBatch, dimensions: int) -> None:
    added = len(batch.chunk_ids)
    if len(entry.index) + added >= LARGE or added >= LARGE_BATCH:
        await asyncio.to_thread(_append_now, entry, batch, dimensions)
    else:
        _append_now(entry, batch, dimensions)


async def _searched(entry: IndexEntry, size: int, search: Callable[[], T]) -> T:
    """`search()` at once on the loop while the index is small (under `LARGE`) and not being
    changed; else in a thread, holding the entry's lock (a reload cannot change it meanwhile).
    `search` reads the entry when it runs, after the lock is taken."""
    if size < LARGE and not entry.lock.locked():
        return search()
    async with entry.lock:
        return await asyncio.to_thread(search)
