"""What a caller may send to knowledge: the request bodies as structs (the OpenAPI document
derives its schemas from them, so the two cannot drift) and the checks that need the config.

Every value is checked here, at the edge, before anything is stored: a collection's name is
what an agent definition names, so it has the agent names' shape; metadata is flat, with the
keys and values a filter can name (`agentos.knowledge.filters`), and bounded in size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from agentos.config.knowledge import KnowledgeConfig
from agentos.errors import InvalidInput
from agentos.knowledge import filters

COLLECTION_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
MAX_QUERY_CHARS = 8192
MAX_TITLE_CHARS = 512
MAX_METADATA_BYTES = 8192  # the whole object, as JSON
MAX_DESCRIPTION_CHARS = 2000
MAX_IDEMPOTENCY_KEY = 200
MAX_CHUNK_TOKENS = 8192
DEFAULT_TOP_K = 5
TEXT_TYPES = ("text/plain", "text/markdown", "text/html")

CollectionName = Annotated[str, msgspec.Meta(pattern=COLLECTION_NAME_PATTERN)]
Model = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Title = Annotated[str, msgspec.Meta(max_length=MAX_TITLE_CHARS)]
Query = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY_CHARS)]


class CollectionCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`embedding_model` and `dimensions` are pinned: every chunk and every query of the
    collection is embedded by that model at that size. `chunk_tokens` and `chunk_overlap`
    default to `[knowledge]`'s; the overlap must be smaller than the chunk."""

    name: CollectionName
    embedding_model: Model
    dimensions: Positive
    chunk_tokens: Positive | None = None
    chunk_overlap: NonNegative | None = None
    description: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION_CHARS)] = ""


class DocumentUpload(msgspec.Struct, forbid_unknown_fields=True):
    """A document as JSON: text in `content` (text/plain, text/markdown, text/html), or any
    supported type, PDF included, base64-encoded in `content_base64`. Exactly one of the two."""

    content_type: str
    content: str | None = None
    content_base64: str | None = None
    title: Title = ""
    metadata: dict[str, Any] = {}


class QueryRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`filter`: `{"key": value}` or `{"key": {"$in": [values]}}`, every key must match; it is
    applied inside both searches, before their top k (docs/knowledge.md)."""

    query: Query
    top_k: Positive = DEFAULT_TOP_K
    filter: dict[str, Any] | None = None


def collection_settings(body: CollectionCreate, config: KnowledgeConfig) -> tuple[int, int]:
    """(chunk_tokens, chunk_overlap) of a new collection.

    Raises:
        InvalidInput: dimensions over `knowledge.max_dimensions`, an overlap not below the chunk.
    """
    if body.dimensions > config.max_dimensions:
        raise InvalidInput(f"dimensions: at most {config.max_dimensions}")
    tokens = config.chunk_tokens if body.chunk_tokens is None else body.chunk_tokens
    overlap = min(config.chunk_overlap, tokens - 1) if body.chunk_overlap is None else body.chunk_overlap
    if tokens > MAX_CHUNK_TOKENS:
        raise InvalidInput(f"chunk_tokens: at most {MAX_CHUNK_TOKENS}")
    if overlap >= tokens:
        raise InvalidInput(f"chunk_overlap: must be below chunk_tokens ({tokens})")
    return tokens, overlap


def document_metadata(raw: Any) -> dict[str, Any]:
    """A document's metadata, checked: flat, filterable keys, scalar values, bounded size.

    Raises:
        InvalidInput: anything else.
    """
    metadata = filters.check_metadata(raw)
    if len(msgspec.json.encode(metadata)) > MAX_METADATA_BYTES:
        raise InvalidInput(f"metadata: at most {MAX_METADATA_BYTES} bytes as JSON")
    return metadata


def query_top_k(top_k: int, config: KnowledgeConfig) -> int:
    """Raises: InvalidInput over `knowledge.max_top_k`."""
    if not 1 <= top_k <= config.max_top_k:
        raise InvalidInput(f"top_k: must be from 1 to {config.max_top_k}")
    return top_k


def query_text(query: str) -> str:
    """Raises: InvalidInput: empty (or only blanks) or too long."""
    if not query.strip() or len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query: 1 to {MAX_QUERY_CHARS} characters, not only blanks")
    return query


def as_struct(raw: Mapping[str, Any] | CollectionCreate) -> CollectionCreate:
    """A collection body given as a mapping (the service's callers) or already decoded."""
    if isinstance(raw, CollectionCreate):
        return raw
    try:
        return msgspec.convert(dict(raw), CollectionCreate)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc)) from None
