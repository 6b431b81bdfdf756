"""The embedder against the real mock provider over HTTP: batches, retries, checks, permits."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from aiohttp import web

from agentos.clock import MonotonicClock
from agentos.config import Settings
from agentos.errors import ProviderLimitTimeout
from agentos.kernel import Kernel
from agentos.knowledge.embeddings import Embedder, EmbeddingError
from agentos.mock.server import MockServer
from agentos.runtime.driver import Driver
from agentos.runtime.runtime import kernel_limits
from tests.conftest import make_settings

MockFactory = Callable[..., Awaitable[MockServer]]


def settings_for(tmp_path: Path, url: str, **overrides: Any) -> Settings:
    """Settings with `knowledge.*` overrides applied to the group directly: the config loader
    does not take `knowledge.*` dotted keys (yet)."""
    prefix = "knowledge."
    knowledge = {key.removeprefix(prefix): value for key, value in overrides.items() if key.startswith(prefix)}
    others = {key: value for key, value in overrides.items() if not key.startswith(prefix)}
    settings = make_settings(tmp_path, url, **others)
    return msgspec.structs.replace(settings, knowledge=msgspec.structs.replace(settings.knowledge, **knowledge))


def embedder_for(tmp_path: Path, url: str, overrides: dict[str, Any] | None = None) -> Embedder:
    return Embedder(settings_for(tmp_path, url, **(overrides or {})))


async def test_vectors_are_unit_rows_in_input_order_and_near_when_texts_share_words(
    tmp_path: Path, mock: MockServer
) -> None:
    embedder = embedder_for(tmp_path, mock.url)
    texts = ["rotate the api key", "the api key rotation policy", "bake a chocolate cake", "rotate the api key"]
    try:
        vectors = await embedder.embed("acme", "mock-embed", 64, texts)
        alone = await embedder.embed("acme", "mock-embed", 64, texts[2:3])
        other_model = await embedder.embed("acme", "other-model", 64, texts[:1])
    finally:
        await embedder.aclose()
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(vectors[0], vectors[3])  # deterministic
    assert np.array_equal(vectors[2], alone[0])  # a text's vector does not depend on its batch
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert not np.allclose(vectors[0], other_model[0])  # another model, other vectors


async def test_texts_are_sent_in_batches_of_embed_batch(tmp_path: Path, mock: MockServer) -> None:
    embedder = embedder_for(tmp_path, mock.url, {"knowledge.embed_batch": 3})
    texts = [f"text number {i}" for i in range(10)]
    try:
        vectors = await embedder.embed("acme", "m", 32, texts)
    finally:
        await embedder.aclose()
    assert mock.stats.embedding_requests == 4 and mock.stats.embedding_inputs == 10
    # each row is its own text's, whatever batch it went in
    again = embedder_for(tmp_path, mock.url, {"knowledge.embed_batch": 64})
    try:
        whole = await again.embed("acme", "m", 32, texts)
    finally:
        await again.aclose()
    assert np.allclose(whole, vectors)
    assert mock.stats.embedding_requests == 5


async def test_an_empty_list_sends_nothing(tmp_path: Path, mock: MockServer) -> None:
    embedder = embedder_for(tmp_path, mock.url)
    try:
        empty = await embedder.embed("acme", "m", 8, [])
    finally:
        await embedder.aclose()
    assert empty.shape == (0, 8)
    assert mock.stats.embedding_requests == 0


async def test_429_and_500_are_retried_until_they_succeed(tmp_path: Path, mock_factory: MockFactory) -> None:
    mock = await mock_factory(fail_every=2, error_rate=0.3, retry_after_s=0.01, seed=3)
    embedder = embedder_for(tmp_path, mock.url, {"knowledge.embed_batch": 2, "knowledge.embed_retries": 8})
    texts = [f"document {i}" for i in range(12)]
    try:
        vectors = await embedder.embed("acme", "m", 16, texts)
    finally:
        await embedder.aclose()
    assert mock.stats.embedding_faults > 0
    assert mock.stats.embedding_requests == 6 + mock.stats.embedding_faults
    assert mock.stats.rate_limited == mock.stats.errors_injected == 0  # chat's counters are apart
    reference = embedder_for(tmp_path, mock.url)
    try:
        mock.stats.reset()
        assert np.allclose(vectors, await reference.embed("acme", "m", 16, texts))
    finally:
        await reference.aclose()


async def test_retries_are_bounded_and_the_error_says_why(tmp_path: Path, mock_factory: MockFactory) -> None:
    mock = await mock_factory(error_rate=1.0)
    embedder = embedder_for(tmp_path, mock.url, {"knowledge.embed_retries": 2})
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed("acme", "m", 16, ["x"])
    finally:
        await embedder.aclose()
    assert mock.stats.embedding_requests == 3
    assert "after 2 retries" in str(caught.value) and "500" in str(caught.value)
    assert caught.value.code == "embedding_failed"


async def test_a_bad_request_is_not_retried(tmp_path: Path, mock: MockServer) -> None:
    embedder = embedder_for(tmp_path, mock.url)
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed("acme", "m", 5000, ["x"])  # over the mock's 4096
    finally:
        await embedder.aclose()
    assert mock.stats.embedding_requests == 1
    assert "400" in str(caught.value) and "dimensions" in str(caught.value)


async def test_an_unreachable_provider_fails_after_its_retries(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed at once: nothing listens there
    embedder = embedder_for(tmp_path, f"http://127.0.0.1:{port}/v1", {"knowledge.embed_retries": 1})
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed("acme", "m", 8, ["x"])
    finally:
        await embedder.aclose()
    assert "provider_unavailable" in str(caught.value)


async def start_provider(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[web.AppRunner, str]:
    """A third-party provider that answers what `answer` says (the mock always honours
    `dimensions`; real providers do not all)."""

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(answer(await request.json()))

    app = web.Application()
    app.router.add_post("/v1/embeddings", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            lambda body: {"data": [{"index": i, "embedding": [0.5] * 7} for i in range(len(body["input"]))]},
            "asked for 8 dimensions, the provider answered 7",
        ),
        (
            lambda body: {"data": [{"index": 0, "embedding": [0.5] * 8}]},
            "asked for 2 embeddings, the provider answered 1",
        ),
        (
            lambda body: {"data": [{"index": 0, "embedding": [1.0] * 8}, {"index": 0, "embedding": [1.0] * 8}]},
            "asked for 2 embeddings",
        ),
        (lambda body: {"object": "list"}, "not an embeddings list"),
    ],
)
async def test_answers_of_the_wrong_shape_fail_with_a_clear_reason(
    tmp_path: Path, answer: Callable[[dict[str, Any]], dict[str, Any]], reason: str
) -> None:
    runner, url = await start_provider(answer)
    embedder = embedder_for(tmp_path, url)
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed("acme", "big-model", 8, ["one", "two"])
    finally:
        await embedder.aclose()
        await runner.cleanup()
    assert reason in str(caught.value) and "big-model" in str(caught.value)


async def test_answers_out_of_order_are_put_back_in_order(tmp_path: Path) -> None:
    def reversed_answer(body: dict[str, Any]) -> dict[str, Any]:
        items = [{"index": i, "embedding": [float(i + 1), 0.0, 0.0]} for i in range(len(body["input"]))]
        return {"data": items[::-1]}

    runner, url = await start_provider(reversed_answer)
    embedder = embedder_for(tmp_path, url)
    try:
        vectors = await embedder.embed("acme", "m", 3, ["a", "b"])
    finally:
        await embedder.aclose()
        await runner.cleanup()
    assert np.array_equal(vectors, np.array([[1, 0, 0], [1, 0, 0]], dtype=np.float32))  # normalised


async def test_each_request_holds_a_provider_permit_of_its_tenant(tmp_path: Path, mock: MockServer) -> None:
    settings = settings_for(
        tmp_path,
        mock.url,
        **{"kernel.concurrency_limit": 1, "kernel.permit_wait_timeout_s": 0.3, "knowledge.embed_batch": 2},
    )
    driver = Driver(Kernel(kernel_limits(settings)), MonotonicClock())
    embedder = Embedder(settings, driver)
    try:
        # the only permit is taken: the embedder waits, then gives up, and sends nothing
        await driver.acquire_permit("someone-else", tenant_id="other")
        with pytest.raises(ProviderLimitTimeout):
            await embedder.embed("acme", "m", 8, ["a", "b", "c"])
        assert mock.stats.embedding_requests == 0
        driver.release_permit("someone-else")
        # one permit, five batches at up to four at once: they take turns, and all give it back
        vectors = await embedder.embed("acme", "m", 8, [f"t{i}" for i in range(10)])
        assert vectors.shape == (10, 8)
        assert mock.stats.embedding_requests == 5
        usage = driver.kernel.tenant_usage("acme")
        assert usage.permits_held == 0 and usage.waiting_for_permit == 0
        assert driver.kernel.statistics().permits_in_use == 0
    finally:
        await embedder.aclose()
        driver.close()


async def test_a_cancelled_embed_gives_its_permits_back(tmp_path: Path, mock_factory: MockFactory) -> None:
    mock = await mock_factory(fail_every=1, retry_after_s=30)  # every request 429, retry in 30 s
    settings = make_settings(tmp_path, mock.url, **{"kernel.concurrency_limit": 2})
    driver = Driver(Kernel(kernel_limits(settings)), MonotonicClock())
    embedder = Embedder(settings, driver)
    try:
        task = asyncio.create_task(embedder.embed("acme", "m", 8, ["a"]))
        await mock.stats.wait_for(lambda s: s.embedding_faults >= 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert driver.kernel.statistics().permits_in_use == 0
    finally:
        await embedder.aclose()
        driver.close()
