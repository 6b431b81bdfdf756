"""The mock's `POST /v1/embeddings`: deterministic vectors that are near for texts sharing words.

A test of retrieval needs no model, but it needs vectors with meaning enough that a query about
"rotating the api key" finds the chunk that talks about api keys. Feature hashing gives that: each
lower-cased word adds +1 or -1 to one coordinate, both picked by a stable hash (blake2b, never
Python's salted `hash()`) of the model name and the word; the sum is L2-normalised. Texts that
share words have a positive cosine; other models give other vectors (as real models do).

Faults: `fail_every` (429 with Retry-After) and `error_rate` (500) apply to embedding requests as
they do to chat requests, counted separately (`embedding_requests`) with their own random draws,
so a bench's chat faults do not move when embeddings are asked for too. `hang_rate` is chat only.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import random
import re
from typing import Any

import numpy as np

from agentos.mock.settings import MockSettings, MockStats, decide_fault

DEFAULT_DIMENSIONS = 256
MAX_DIMENSIONS = 4096
MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
MAX_INPUT_CHARS = 1 << 20

_WORD = re.compile(r"\w+")


class EmbeddingRequestError(ValueError):
    """The request is malformed: a 400 whose message says why."""


class EmbeddingsMock:
    """The handler's state: its own fault counter and random draws."""

    def __init__(self, settings: MockSettings, stats: MockStats) -> None:
        self.settings = settings
        self.stats = stats
        self.reset()

    def reset(self) -> None:
        self._rng = random.Random(self.settings.seed)

    def respond(self, body: dict[str, Any], default_model: str) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """(status, JSON body, headers) of the answer to a request body: a fault, a 400, or the vectors."""
        self.stats.embedding_requests += 1
        fault = decide_fault(self.settings, self.stats.embedding_requests, self._rng)
        if fault == "rate_limit":
            self.stats.embedding_faults += 1
            headers = {"Retry-After": f"{self.settings.retry_after_s:g}"}
            return 429, _error("rate_limit_exceeded", "mock: rate limited"), headers
        if fault == "error":
            self.stats.embedding_faults += 1
            return 500, _error("server_error", "mock: injected error"), None
        try:
            return 200, self.answer(body, default_model), None
        except EmbeddingRequestError as exc:
            return 400, _error("invalid_request_error", str(exc)), None

    def answer(self, body: dict[str, Any], default_model: str) -> dict[str, Any]:
        """The response body for a request body.

        Raises:
            EmbeddingRequestError: the body is not a valid embeddings request.
        """
        inputs, model, dimensions, encoding = parse_request(body, default_model)
        self.stats.embedding_inputs += len(inputs)
        vectors = embed_texts(inputs, model, dimensions)
        data = [{"object": "embedding", "index": i, "embedding": _encoded(v, encoding)} for i, v in enumerate(vectors)]
        words = sum(len(_WORD.findall(text)) for text in inputs)
        usage = {"prompt_tokens": words, "total_tokens": words}
        return {"object": "list", "data": data, "model": model, "usage": usage}


def parse_request(body: dict[str, Any], default_model: str) -> tuple[list[str], str, int, str]:
    """(inputs, model, dimensions, encoding_format) of a request body."""
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(item, str) for item in inputs):
        raise EmbeddingRequestError("input must be a string or a non-empty array of strings")
    if len(inputs) > MAX_INPUTS:
        raise EmbeddingRequestError(f"at most {MAX_INPUTS} inputs per request")
    if any(len(text) > MAX_INPUT_CHARS for text in inputs):
        raise EmbeddingRequestError(f"an input is over {MAX_INPUT_CHARS} characters")
    dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise EmbeddingRequestError(f"dimensions must be an integer from 1 to {MAX_DIMENSIONS}")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise EmbeddingRequestError("encoding_format must be 'float' or 'base64'")
    model = body.get("model")
    return inputs, model if isinstance(model, str) and model else default_model, dimensions, encoding


def embed_texts(texts: list[str], model: str, dimensions: int) -> np.ndarray:
    """Float64 (len(texts), dimensions), rows of unit length."""
    vectors = np.zeros((len(texts), dimensions), dtype=np.float64)
    for row, text in enumerate(texts):
        words = _WORD.findall(text.lower()) or [""]  # no words: still a unit vector, the same for all
        slots = [_slot(model, word, dimensions) for word in words]
        np.add.at(vectors[row], [s[0] for s in slots], [s[1] for s in slots])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    # the words cancelled out (two of them on one slot, opposite signs): the no-words vector
    vectors[norms[:, 0] == 0, _slot(model, "", dimensions)[0]] = 1.0
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled: np.ndarray = vectors / norms
    return scaled


@functools.lru_cache(maxsize=1 << 16)
def _slot(model: str, word: str, dimensions: int) -> tuple[int, float]:
    """The coordinate a word adds to, and its sign: a stable hash of model and word."""
    digest = hashlib.blake2b(f"{model}\x00{word}".encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dimensions, 1.0 if value & 1 else -1.0


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # OpenAI's: little-endian float32, base64
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    values: list[float] = vector.tolist()
    return values


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code}}
