"""The background indexer: a queued document -> text -> chunks -> embeddings -> `ready`.

`knowledge.indexers` workers per node claim documents from the store with a lease
(`knowledge.lease_s`, renewed while they work), so a document is indexed by one worker at a
time on any node, and a crashed worker's document is taken again when its lease runs out. They
wake when a document is added here, and at the end of this node's postponements (a transient
failure); for the rest (documents accepted by other nodes while theirs were busy) they poll:
every `POLL_S` after work was found, the wait doubling while none is, up to `IDLE_POLL_MAX_S`
(an idle server's indexers then cost almost nothing), and on PostgreSQL never past the moment
the first lease in the store runs out (a dead node's document, another node's postponement),
which a look that found nothing reads (`next_claim_ms`).

Failures:
  - permanent (an unreadable PDF, no text, a provider that answers vectors of another size, a
    bug): the document is `failed` with a reason; trying again would fail the same way.
  - transient (the provider down or overloaded, no provider permit in time, the store away):
    the document is postponed, not failed: its lease is cut to a backoff (1 s, 2 s, 4 s, ... up
    to `knowledge.lease_s`) and any worker takes it again after that. Each claim counts an
    attempt; after `MAX_ATTEMPTS` the document fails with the last reason.

Start-up (crash safety): queued documents are simply claimed. A document left `indexing` by a
process that died holds a lease until it runs out; on the embedded backend only this process
uses knowledge.db, so every lease found at start-up is a dead process's, and those documents
are claimed at once. On PostgreSQL other nodes may be alive: their leases are waited out.

Extraction and chunking run in a thread (`asyncio.to_thread`): a large PDF must not stall
the event loop that serves requests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable, Coroutine
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from agentos.config.knowledge import KnowledgeConfig
from agentos.errors import ProviderError, ProviderLimitTimeout, RequestError, StoreError, StoreUnavailable
from agentos.knowledge.chunking import split
from agentos.knowledge.embeddings import Embeddings
from agentos.knowledge.extract import extract_text
from agentos.knowledge.records import ChunkRow, Collection, DocumentRow
from agentos.knowledge.storage import KnowledgeStorage
from agentos.waiting import IdlePoll, wait_event

log = logging.getLogger("agentos.knowledge")

POLL_S = 1.0  # how soon an idle worker looks at the store again after it found work
IDLE_POLL_MAX_S = 16.0  # ... doubling each empty look up to this (a node's own adds wake it at once)
MAX_ATTEMPTS = 20  # claims of one document (transient failures) before it fails
MAX_REASON = 500
Job = tuple[DocumentRow, Collection, bytes]


@dataclass(slots=True)
class IndexerStats:
    documents_indexed: int = 0
    documents_failed: int = 0
    chunks_indexed: int = 0
    backlog: int = 0  # documents queued or indexing, every tenant's: read by the ticker, not at scrape


class Postpone(Exception):
    """A transient failure: try the document again later."""


def new_owner() -> str:
    """This node's lease owner: unique per process start (a restarted process does not hold
    the leases of the one before)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(eq=False, repr=False)
class Indexer:
    """The background indexers (`config.indexers` workers and a ticker). `embedded`: the
    storage is this process's own file, so every lease in it at start is a dead process's;
    `on_tick`: called on each tick."""

    config: KnowledgeConfig
    storage: KnowledgeStorage
    embedder: Embeddings
    now_ms: Callable[[], int]
    _: KW_ONLY
    embedded: bool
    on_tick: Callable[[], object] | None = None
    owner: str = field(init=False, default_factory=new_owner)
    stats: IndexerStats = field(init=False, default_factory=IndexerStats)
    _wake: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    _poll: IdlePoll = field(init=False, default_factory=lambda: IdlePoll(POLL_S, IDLE_POLL_MAX_S))
    _recover_until: int | None = field(init=False, default=None)
    _tasks: list[asyncio.Task[None]] = field(init=False, default_factory=list)

    @property
    def _lease_ms(self) -> int:
        return int(self.config.lease_s * 1000)

    async def start(self) -> None:
        if self.embedded:  # every lease in knowledge.db now is a dead process's: see _claim
            self._recover_until = self.now_ms() + self._lease_ms
        self.stats.backlog = await self.storage.pending()
        self._tasks = [
            asyncio.create_task(self._work(), name=f"knowledge-indexer-{i}") for i in range(self.config.indexers)
        ]
        self._tasks.append(asyncio.create_task(self._tick(), name="knowledge-ticker"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def wake(self) -> None:
        """A document was added: a waiting worker claims it now, not at the next poll."""
        self.stats.backlog += 1
        self._poll.reset()
        self._wake.set()

    async def _tick(self) -> None:
        """The backlog gauge (the store is asked here, not at scrape time) and the idle sweep;
        as often as the workers look at the store."""
        while True:
            await asyncio.sleep(self._poll.current_s)
            try:
                self.stats.backlog = await self.storage.pending()
            except Exception as exc:  # the store away: the gauge keeps its last value
                log.warning("knowledge backlog not read: %s", exc)
            if self.on_tick is not None:
                self.on_tick()

    async def _work(self) -> None:
        while True:
            try:
                self._wake.clear()  # before claiming: a document added meanwhile sets it again
                job = await self._claim()
                if job is None:
                    await self._idle()
                else:
                    await self._index(*job)
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:  # nobody's bug: the documents wait in the store
                log.warning("knowledge indexer: %s", exc)
                await self._idle()
            except Exception:  # a bug: this worker must not die of it
                log.exception("knowledge indexer round failed")
                await self._idle()

    async def _claim(self) -> Job | None:
        """A document to index, or None. Recovering (embedded backend, until a claim finds
        nothing), leases are judged at `_recover_until`: every lease taken before this start
        ends by then (a dead process's), while those this process takes or renews end later."""
        now = self.now_ms() if self._recover_until is None else max(self.now_ms(), self._recover_until)
        claimed = await self.storage.claim_documents(self.owner, now, self._lease_ms, 1)
        if not claimed:
            self._recover_until = None
            if not self.embedded:  # other nodes' leases: looked at again when the first runs out
                self._poll.seen_due(await self.storage.next_claim_ms())
        self._poll.found(bool(claimed))
        return claimed[0] if claimed else None

    async def _idle(self) -> None:
        """Until a document is added here, or it is time to look at the store again: the wait
        doubles while nothing is found (an idle server's indexers cost almost nothing), and
        ends at this node's earliest postponement, or when the first lease the last empty look
        saw runs out (another node's documents: their node died, or postponed them). What this
        waits for alone: a document added on another node while every one of its workers was busy."""
        await wait_event(self._wake, self._poll.wait_s(self.now_ms()))

    async def _index(self, document: DocumentRow, collection: Collection, content: bytes) -> None:
        try:
            chunks = await self._renewed(document.document_id, self._chunks(document, collection, content))
            if await self.storage.save_chunks(self.owner, document.document_id, chunks, self.now_ms()):
                self.stats.documents_indexed += 1
                self.stats.chunks_indexed += len(chunks)
        except RequestError as exc:  # extraction: unsupported, unreadable, empty
            await self._fail(document, f"{exc.code}: {exc.message}")
        except (ProviderError, StoreError, Postpone) as exc:
            await self._retry_or_fail(document, exc)
        except Exception:
            log.exception("indexing %s failed", document.document_id)
            await self._fail(document, "internal_error: see the server log")

    async def _renewed(self, document_id: str, work: Coroutine[Any, Any, list[ChunkRow]]) -> list[ChunkRow]:
        """`work`, with the document's lease renewed meanwhile; the renewals stop before what
        follows (a postponement shortens the lease, and a late renewal must not undo it)."""
        renewer = asyncio.create_task(self._renew(document_id))
        try:
            return await work
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _chunks(self, document: DocumentRow, collection: Collection, content: bytes) -> list[ChunkRow]:
        text = await asyncio.to_thread(extract_text, content, document.content_type)
        pieces = await asyncio.to_thread(split, text, collection.chunk_tokens, collection.chunk_overlap)
        if not pieces:
            raise RequestError("the document has no text to index", code="empty_document")
        vectors = await self.embedder.embed(
            document.tenant_id, collection.embedding_model, collection.dimensions, pieces
        )
        if vectors.shape != (len(pieces), collection.dimensions):
            raise RequestError(
                f"the provider answered vectors of shape {vectors.shape}, not ({len(pieces)}, {collection.dimensions})",
                code="dimension_mismatch",
            )
        rows = vectors.astype("<f4", copy=False)
        return [ChunkRow(0, document.document_id, i, piece, rows[i].tobytes()) for i, piece in enumerate(pieces)]

    async def _retry_or_fail(self, document: DocumentRow, exc: Exception) -> None:
        reason = f"{getattr(exc, 'code', 'store_error')}: {exc}"
        if not _transient(exc) or document.attempts >= MAX_ATTEMPTS:
            await self._fail(document, reason)
            return
        backoff_ms = min(self._lease_ms, 1000 * 2 ** max(document.attempts - 1, 0))
        until = self.now_ms() + backoff_ms
        if self._recover_until is not None:  # recovering claims would take it again at once
            until = max(until, self._recover_until)
        log.info("indexing %s postponed until %d (%s)", document.document_id, until, reason)
        self._poll.due_at(until)
        try:  # a shorter lease is the postponement: any worker takes it again when it runs out
            await self.storage.renew_lease(self.owner, [document.document_id], until)
        except Exception as renew_exc:  # the lease then runs out at its full length
            log.warning("postponing %s: %s", document.document_id, renew_exc)

    async def _fail(self, document: DocumentRow, reason: str) -> None:
        log.info("document %s failed: %s", document.document_id, reason)
        await self.storage.fail_document(self.owner, document.document_id, reason[:MAX_REASON], self.now_ms())
        self.stats.documents_failed += 1

    async def _renew(self, document_id: str) -> None:
        """Keep the lease while the document is worked on (a large PDF, a slow provider)."""
        interval = self.config.lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self.storage.renew_lease(self.owner, [document_id], self.now_ms() + self._lease_ms)
            except Exception as exc:  # the next renewal may succeed; the lease is 3 intervals long
                log.warning("renewing the lease of %s: %s", document_id, exc)


def _transient(exc: Exception) -> bool:
    if isinstance(exc, ProviderLimitTimeout | Postpone | StoreError):
        return True
    return isinstance(exc, ProviderError) and exc.retryable
