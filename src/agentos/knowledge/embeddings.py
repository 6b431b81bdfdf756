"""Embeddings through the provider's OpenAI-compatible `/v1/embeddings`.

The same provider (and the same aiohttp client setup) as chat: `provider.url` ends with `/v1`,
so the endpoint is `{provider.url}/embeddings`. Each request holds one of the kernel's provider
permits for its tenant, so indexing a large upload competes fairly with chat turns and runs
instead of flooding the provider; a request gives its permit back before it backs off, so a
throttled batch does not hold a slot while it sleeps.

Every answer is checked: as many vectors as texts, each of the collection's dimensions (a
provider that ignores `dimensions`, or a model change, must fail loudly here rather than store
vectors no query can be compared with)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import aiohttp
import msgspec

from agentos.config import Settings
from agentos.errors import (
    ProviderError,
    ProviderLimitTimeout,
    ProviderTimeout,
)
from agentos.ids import new_id
from agentos.providers.base import ProviderPermits
from agentos.providers.transport import RetryPolicy, connection_errors, http_error, new_client_session

if TYPE_CHECKING:
    import numpy as np


log = logging.getLogger(__name__)

CONCURRENT_REQUESTS = 4  # batches of one `embed` call in flight at once
MAX_BACKOFF_S = 10.0
MAX_ANSWER_BYTES = 256 << 20  # 2048 inputs x 4096 dimensions as JSON floats fit


class EmbeddingError(ProviderError):
    """The provider gave no usable embeddings: retries exhausted, or vectors of the wrong count
    or size (the message names the model and dimensions)."""

    code = "embedding_failed"


class _Item(msgspec.Struct):
    index: int
    embedding: list[float]


class _Answer(msgspec.Struct):
    data: list[_Item]


_decode_answer = msgspec.json.Decoder(_Answer).decode


class Embeddings(Protocol):
    """What the knowledge service and its indexer ask of an embedder: `Embedder` (the
    provider's /embeddings), or the FTS micro-bench's in-process one."""

    async def embed(self, tenant_id: str, model: str, dimensions: int, texts: Sequence[str]) -> np.ndarray: ...

    async def aclose(self) -> None: ...


class Embedder:
    """Usage::

    embedder = Embedder(settings, driver)       # provider.url / api_key; knowledge.embed_batch, embed_retries
    vectors = await embedder.embed("acme", "mock-embed", 256, ["text one", "text two"])
    await embedder.aclose()
    """

    def __init__(self, settings: Settings, driver: ProviderPermits | None = None) -> None:
        self._provider = settings.provider
        self._batch = settings.knowledge.embed_batch
        # The chat client's policy, with longer waits: indexing is in the background, no user waits
        self._retries = RetryPolicy(
            max_retries=settings.knowledge.embed_retries, max_backoff_s=MAX_BACKOFF_S, max_wait_s=MAX_BACKOFF_S
        )
        self._driver = driver
        self._url = settings.provider.url.rstrip("/") + "/embeddings"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if settings.provider.api_key:
            self._headers["Authorization"] = f"Bearer {settings.provider.api_key}"
        # a request's whole answer is its "first token": the same bound as a chat stream's
        self._timeout = aiohttp.ClientTimeout(total=settings.provider.first_token_timeout_s)
        self._session: aiohttp.ClientSession | None = None  # made in the loop, at the first request

    async def embed(self, tenant_id: str, model: str, dimensions: int, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dimensions), rows L2-normalised. Requests of at
        most `knowledge.embed_batch` texts, each holding one of the kernel's provider permits for
        `tenant_id` (when a driver is given); 429/5xx/connection errors are retried
        (`knowledge.embed_retries`, backoff honouring Retry-After).

        Raises:
            EmbeddingError (an `agentos.errors.ProviderError`): retries exhausted, or the provider
                answered vectors of another size than `dimensions` (the reason says which).
            ProviderLimitTimeout: no provider permit in time.
        """
        if 0 < len(texts) <= self._batch:  # one request (a query): no gate, task or gather around it
            return await self._batch_with_retries(tenant_id, model, dimensions, list(texts))
        import numpy as np  # here, not at import: a server that never embeds never loads numpy (~16 MB)

        out = np.zeros((len(texts), dimensions), dtype=np.float32)
        if not texts:
            return out
        gate = asyncio.Semaphore(CONCURRENT_REQUESTS)

        async def one(start: int) -> None:
            async with gate:
                batch = list(texts[start : start + self._batch])
                out[start : start + len(batch)] = await self._batch_with_retries(tenant_id, model, dimensions, batch)

        tasks = [asyncio.create_task(one(start)) for start in range(0, len(texts), self._batch)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            # the first failure (or a cancel) ends the other batches: no request left running
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return out

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _batch_with_retries(self, tenant_id: str, model: str, dimensions: int, texts: list[str]) -> np.ndarray:
        body = msgspec.json.encode(
            {"model": model, "input": texts, "dimensions": dimensions, "encoding_format": "float"}
        )
        try:
            raw = await self._retries.call(lambda: self._post_with_permit(tenant_id, body), what="embeddings")
        except ProviderError as error:  # retries spent, or not retryable (a 400, a permit refused)
            if isinstance(error, ProviderLimitTimeout):
                raise  # the kernel said no within its wait
            raise _failed(error, model, dimensions, self._retries.max_retries if error.retryable else 0) from error
        try:
            return _vectors(raw, model, dimensions, len(texts))
        except EmbeddingError as error:
            raise _failed(error, model, dimensions, 0) from error

    async def _post_with_permit(self, tenant_id: str, body: bytes) -> bytes:
        if self._driver is None:
            return await self._post(body)
        stream_id = new_id("embed")  # random: in a cluster, stream ids meet other nodes' ones
        await self._driver.acquire_permit(stream_id, owner=None, tenant_id=tenant_id)
        try:
            return await self._post(body)
        finally:
            self._driver.release_permit(stream_id)

    async def _post(self, body: bytes) -> bytes:
        """The answer's body; a `ProviderError` (retryable or not) for anything else, mapped as
        the chat client maps its own (`agentos.providers.openai_compat`)."""
        if self._session is None:
            self._session = new_client_session(self._provider)
        try:
            with connection_errors():
                async with self._session.post(self._url, data=body, headers=self._headers, timeout=self._timeout) as r:
                    if r.status >= 400:
                        raise await http_error(r)
                    return await _read_capped(r)
        except TimeoutError:
            raise ProviderTimeout("provider embeddings timeout", retryable=True) from None


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    """The body, refused past MAX_ANSWER_BYTES (a broken or hostile upstream cannot exhaust memory)."""
    if (response.content_length or 0) > MAX_ANSWER_BYTES:
        raise EmbeddingError(f"the provider's answer is over {MAX_ANSWER_BYTES} bytes")
    parts: list[bytes] = []
    size = 0
    async for part in response.content.iter_chunked(1 << 20):
        size += len(part)
        if size > MAX_ANSWER_BYTES:
            raise EmbeddingError(f"the provider's answer is over {MAX_ANSWER_BYTES} bytes")
        parts.append(part)
    return b"".join(parts)


def _vectors(raw: bytes, model: str, dimensions: int, count: int) -> np.ndarray:
    """The answer's vectors in input order, checked and L2-normalised (float32)."""
    import numpy as np

    try:
        items = _decode_answer(raw).data
    except msgspec.DecodeError as exc:
        raise EmbeddingError(f"model {model!r}: the provider's answer is not an embeddings list ({exc})") from None
    indexes = sorted(item.index for item in items)
    if indexes != list(range(count)):
        raise EmbeddingError(f"model {model!r}: asked for {count} embeddings, the provider answered {len(items)}")
    sizes = {len(item.embedding) for item in items}
    if sizes != {dimensions}:
        got = ", ".join(str(size) for size in sorted(sizes))
        raise EmbeddingError(f"model {model!r}: asked for {dimensions} dimensions, the provider answered {got}")
    items.sort(key=lambda item: item.index)
    vectors = np.array([item.embedding for item in items], dtype=np.float32)  # one conversion, not one per row
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingError(f"model {model!r}: the provider answered a vector that is not finite")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalised: np.ndarray = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    return normalised


def _failed(error: ProviderError, model: str, dimensions: int, retries: int) -> ProviderError:
    """The error `embed` raises: an EmbeddingError as it is; any other provider error wrapped, so
    the caller sees one kind, with the cause's code in the message."""
    if isinstance(error, EmbeddingError):
        return error
    tried = f" after {retries} retries" if retries else ""
    return EmbeddingError(
        f"embeddings of model {model!r} ({dimensions} dimensions) failed{tried}: {error.code}: {error}",
        retryable=error.retryable,
        retry_after_s=error.retry_after_s,
    )
