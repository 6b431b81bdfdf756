"""The mock provider's /v1/embeddings over real HTTP: shape, meaning, bad input, faults, speed."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest

from agentos.mock.embeddings import DEFAULT_DIMENSIONS, embed_texts
from agentos.mock.server import MockServer

MockFactory = Callable[..., Awaitable[MockServer]]


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(client: aiohttp.ClientSession, mock: MockServer, body: Any) -> tuple[int, Any]:
    async with client.post(f"{mock.url}/embeddings", json=body) as response:
        return response.status, await response.json()


async def test_vectors_have_the_asked_dimensions_and_unit_length(
    client: aiohttp.ClientSession, mock: MockServer
) -> None:
    status, body = await post(client, mock, {"model": "emb-1", "input": ["a b c", "d"], "dimensions": 48})
    assert status == 200
    assert body["model"] == "emb-1" and body["object"] == "list"
    assert [item["index"] for item in body["data"]] == [0, 1]
    vectors = np.array([item["embedding"] for item in body["data"]])
    assert vectors.shape == (2, 48)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert body["usage"]["prompt_tokens"] == 4
    status, body = await post(client, mock, {"input": "one string"})
    assert status == 200 and len(body["data"][0]["embedding"]) == DEFAULT_DIMENSIONS
    assert mock.stats.embedding_requests == 2 and mock.stats.embedding_inputs == 3
    assert mock.stats.requests == 0  # chat's counter


async def test_base64_is_little_endian_float32(client: aiohttp.ClientSession, mock: MockServer) -> None:
    _, floats = await post(client, mock, {"input": ["x y"], "dimensions": 8})
    _, packed = await post(client, mock, {"input": ["x y"], "dimensions": 8, "encoding_format": "base64"})
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, floats["data"][0]["embedding"], atol=1e-7)


def test_texts_sharing_words_are_near_and_case_does_not_matter() -> None:
    texts = ["Reset the PASSWORD", "reset the password", "how to reset a password", "weather in Paris"]
    v = embed_texts(texts, "m", 256)
    assert np.allclose(v[0], v[1])
    assert v[0] @ v[2] > 0.3 > abs(v[0] @ v[3])
    assert not np.allclose(embed_texts(["x"], "m", 16), embed_texts(["x"], "n", 16))  # per model
    assert np.allclose(np.linalg.norm(embed_texts(["", "!!!"], "m", 16), axis=1), 1.0)  # no words: still a unit


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"input": []},
        {"input": 5},
        {"input": [1, 2]},
        {"input": ["x", None]},
        {"input": "x", "dimensions": 0},
        {"input": "x", "dimensions": 4097},
        {"input": "x", "dimensions": "8"},
        {"input": "x", "dimensions": True},
        {"input": "x", "encoding_format": "int8"},
        {"input": ["x"] * 2049},
    ],
)
async def test_bad_requests_are_400(client: aiohttp.ClientSession, mock: MockServer, body: dict[str, Any]) -> None:
    status, answer = await post(client, mock, body)
    assert status == 400
    assert answer["error"]["message"]


async def test_faults_apply_to_embeddings_with_their_own_count(
    client: aiohttp.ClientSession, mock_factory: MockFactory
) -> None:
    mock = await mock_factory(fail_every=2, retry_after_s=0.5)
    statuses = []
    for _ in range(4):
        async with client.post(f"{mock.url}/embeddings", json={"input": "x"}) as response:
            statuses.append((response.status, response.headers.get("Retry-After")))
            await response.read()
    assert statuses == [(200, None), (429, "0.5"), (200, None), (429, "0.5")]
    assert mock.stats.embedding_faults == 2 and mock.stats.rate_limited == 0
    errors = await mock_factory(error_rate=1.0)
    assert (await post(client, errors, {"input": "x"}))[0] == 500


def test_a_bench_sized_batch_is_fast() -> None:
    texts = [" ".join(f"word{(i * 7 + j) % 5000}" for j in range(300)) for i in range(64)]
    started = time.perf_counter()
    vectors = embed_texts(texts, "m", 1024)
    assert time.perf_counter() - started < 1.0
    assert vectors.shape == (64, 1024)
