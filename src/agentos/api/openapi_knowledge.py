"""The knowledge routes' part of the OpenAPI document (`agentos.api.openapi` merges it in).

The JSON request bodies' schemas are derived from the structs `agentos.knowledge.inputs`
decodes (so they cannot drift); the answers' are written by hand to match
`agentos.knowledge.records` (`to_dict`), and tests check real answers against them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.api.knowledge import DOCUMENTS_PAGE
from agentos.api.openapi_limits import retry_error
from agentos.api.openapi_parts import BAD_BODY
from agentos.api.openapi_parts import error as _error
from agentos.api.openapi_parts import json_answer as _json
from agentos.api.openapi_parts import json_body as _body
from agentos.api.schema_parts import NOT_BLANK, after_param, limit_param, ref
from agentos.config.knowledge import KnowledgeConfig
from agentos.knowledge import filters
from agentos.knowledge.extract import SUPPORTED_TYPES
from agentos.knowledge.inputs import (
    COLLECTION_NAME_PATTERN,
    MAX_CHUNK_TOKENS,
    MAX_IDEMPOTENCY_KEY,
    MAX_METADATA_BYTES,
    MAX_TITLE_CHARS,
    TEXT_TYPES,
    CollectionCreate,
    DocumentUpload,
    QueryRequest,
)

_REF = "#/components/schemas/{name}"
_, _BODIES = msgspec.json.schema_components([CollectionCreate, DocumentUpload, QueryRequest], ref_template=_REF)
# The bounds the server checks beyond the structs' (`agentos.knowledge.inputs`), at the defaults of
# `[knowledge]` (a deployment may set its own max_dimensions and max_top_k).
_DEFAULTS = KnowledgeConfig()
_BODIES["CollectionCreate"]["properties"]["dimensions"]["maximum"] = _DEFAULTS.max_dimensions
_BODIES["CollectionCreate"]["properties"]["chunk_tokens"]["anyOf"][0]["maximum"] = MAX_CHUNK_TOKENS
# the overlap is below the chunk (`collection_settings`)
_BODIES["CollectionCreate"]["properties"]["chunk_overlap"]["anyOf"][0]["maximum"] = MAX_CHUNK_TOKENS - 1
_BODIES["QueryRequest"]["properties"]["top_k"]["maximum"] = _DEFAULTS.max_top_k
_BODIES["DocumentUpload"]["properties"]["content_type"] = {"enum": list(SUPPORTED_TYPES)}
# What `agentos.knowledge.filters` takes as a metadata value and a filter (a JSON number with no
# fraction is an integer, so it must be one SQLite holds).
_SCALAR = {
    "anyOf": [
        {"type": "string", "maxLength": filters.MAX_STRING, "pattern": "^[^\\u0000]*$"},
        {"type": "integer", "minimum": -filters.MAX_INT, "maximum": filters.MAX_INT},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "boolean"},
    ]
}
_KEYS = {"pattern": filters.KEY.pattern}
_FILTER = {
    "type": "object",
    "maxProperties": filters.MAX_KEYS,
    "propertyNames": _KEYS,
    "additionalProperties": {
        "anyOf": [
            _SCALAR,
            {
                "type": "object",
                "required": ["$in"],
                "properties": {"$in": {"type": "array", "minItems": 1, "maxItems": filters.MAX_IN, "items": _SCALAR}},
                "additionalProperties": False,
            },
        ]
    },
}
_BODIES["QueryRequest"]["properties"]["filter"]["anyOf"][0] = _FILTER
_BODIES["DocumentUpload"]["properties"]["metadata"] |= {
    "maxProperties": 64,
    "propertyNames": _KEYS,
    "additionalProperties": {"anyOf": [_SCALAR, {"type": "null"}]},
    "description": f"at most {MAX_METADATA_BYTES} bytes as JSON",
}
_BODIES["QueryRequest"]["properties"]["query"]["pattern"] = NOT_BLANK

_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}, "description": "the collection"}
_DOCUMENT_ID = {"name": "document_id", "in": "path", "required": True, "schema": {"type": "string"}}
_STRING = {"type": "string"}
_INT = {"type": "integer"}
_METADATA = {
    "type": "object",
    "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
    "description": "flat: keys of 1-64 of A-Z a-z 0-9 _ . -, scalar values; at most 8 KiB as JSON",
}
_LOCATION = {"Location": {"description": "where to read it", "schema": _STRING}}
_UPLOAD_HEADERS = [
    {
        "name": "Idempotency-Key",
        "in": "header",
        "schema": {"type": "string", "pattern": f"^[\\x21-\\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}$"},
        "description": "the same key with the same content answers the same document; with other content, 409",
    },
    {
        "name": "Agentos-Title",
        "in": "header",
        "schema": {"type": "string", "maxLength": MAX_TITLE_CHARS},
        "description": "the title of a document sent as the body itself",
    },
    {
        "name": "Agentos-Metadata",
        "in": "header",
        "schema": {"type": "string"},
        "description": "the metadata (a JSON object) of a document sent as the body itself",
    },
]


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": list(properties), "properties": properties}


def _page(item: str) -> dict[str, Any]:
    return _object({"data": {"type": "array", "items": ref(item)}, "next_cursor": {"type": ["string", "null"]}})


KNOWLEDGE_SCHEMAS: dict[str, Any] = {
    **_BODIES,
    "Collection": _object(
        {
            "name": {"type": "string", "pattern": COLLECTION_NAME_PATTERN},
            "collection_id": _STRING,
            "embedding_model": {**_STRING, "description": "pinned at creation"},
            "dimensions": {**_INT, "description": "pinned at creation"},
            "chunk_tokens": _INT,
            "chunk_overlap": _INT,
            "description": _STRING,
            "documents": _INT,
            "chunks": _INT,
            "created_ms": _INT,
        }
    ),
    "CollectionPage": _page("Collection"),
    "Document": _object(
        {
            "document_id": _STRING,
            "collection": _STRING,
            "title": _STRING,
            "content_type": {"enum": list(SUPPORTED_TYPES)},
            "size_bytes": _INT,
            "sha256": _STRING,
            "metadata": _METADATA,
            "status": {
                "enum": ["queued", "indexing", "ready", "failed"],
                "description": "queued and indexing: accepted, not yet searchable; failed: see reason",
            },
            "reason": {"type": ["string", "null"], "description": "why it failed"},
            "chunks": _INT,
            "created_ms": _INT,
            "updated_ms": _INT,
        }
    ),
    "DocumentPage": _page("Document"),
    "Hit": _object(
        {
            "document_id": _STRING,
            "chunk_id": _INT,
            "ordinal": {**_INT, "description": "the chunk's position in its document, from 0"},
            "text": _STRING,
            "score": {"type": "number", "description": "reciprocal rank fusion of the vector and full-text ranks"},
            "title": _STRING,
            "metadata": _METADATA,
        }
    ),
    "QueryResults": _object({"results": {"type": "array", "items": ref("Hit")}}),
}

_RAW_TYPES: dict[str, Any] = {
    **{t: {"schema": {"type": "string"}} for t in TEXT_TYPES},
    "application/pdf": {"schema": {"type": "string", "format": "binary"}},
}

_UPLOAD_BODY = {
    "required": True,
    "content": {"application/json": {"schema": ref("DocumentUpload")}, **_RAW_TYPES},
    "description": "JSON, or the document itself with its Content-Type (and the Agentos-* headers)",
}
_NO_COLLECTION = {"404": _error("Unknown collection")}
_NO_DOCUMENT = {"404": _error("Unknown collection or document")}

KNOWLEDGE_PATHS: dict[str, Any] = {
    "/v1/collections": {
        "post": {
            "summary": "Create a collection; its embedding model and dimensions are pinned",
            "requestBody": _body("CollectionCreate"),
            "responses": {
                "201": {**_json("The collection", "Collection"), "headers": _LOCATION},
                **BAD_BODY,
                "409": _error("`collection_exists`, or `too_many_collections` (knowledge.max_collections)"),
            },
        },
        "get": {
            "summary": "List the tenant's collections",
            "responses": {"200": _json("The collections, by name", "CollectionPage")},
        },
    },
    "/v1/collections/{name}": {
        "parameters": [_NAME],
        "get": {
            "summary": "Read a collection, with its document and chunk counts",
            "responses": {"200": _json("The collection", "Collection"), **_NO_COLLECTION},
        },
        "delete": {
            "summary": "Delete a collection with its documents and chunks",
            "responses": {"204": {"description": "Deleted"}, **_NO_COLLECTION},
        },
    },
    "/v1/collections/{name}/documents": {
        "parameters": [_NAME],
        "post": {
            "summary": "Upload a document; 202 once it is committed durably, indexed in the background",
            "parameters": _UPLOAD_HEADERS,
            "requestBody": _UPLOAD_BODY,
            "responses": {
                "202": {
                    **_json("Accepted: the document (queued; an idempotent replay: its state now)", "Document"),
                    "headers": {
                        **_LOCATION,
                        "Idempotent-Replayed": {"description": "true: an earlier upload's", "schema": _STRING},
                    },
                },
                "400": _error("Malformed JSON, base64 or Agentos-Metadata"),
                **_NO_COLLECTION,
                "409": _error("`idempotency_key_reused` (other content), `too_many_documents`"),
                "413": _error("Over knowledge.max_document_bytes"),
                "415": _error("`unsupported_media_type`"),
                "422": _error("Wrong fields, an empty document, bad metadata or Idempotency-Key"),
            },
        },
        "get": {
            "summary": "List the collection's documents, by id",
            "parameters": [limit_param(DOCUMENTS_PAGE), after_param("string")],
            "responses": {
                "200": _json("A page of documents", "DocumentPage"),
                **_NO_COLLECTION,
                "422": _error("A bad limit"),
            },
        },
    },
    "/v1/collections/{name}/documents/{document_id}": {
        "parameters": [_NAME, _DOCUMENT_ID],
        "get": {
            "summary": "Read a document and its state (queued, indexing, ready, failed with a reason)",
            "responses": {"200": _json("The document", "Document"), **_NO_DOCUMENT},
        },
        "delete": {
            "summary": "Delete a document and its chunks",
            "responses": {"204": {"description": "Deleted"}, **_NO_DOCUMENT},
        },
    },
    "/v1/collections/{name}/query": {
        "parameters": [_NAME],
        "post": {
            "summary": "Hybrid retrieval: vector and full-text search with the filter inside, fused by rank",
            "requestBody": _body("QueryRequest"),
            "responses": {
                "200": _json("The best chunks, best first", "QueryResults"),
                **BAD_BODY,
                **_NO_COLLECTION,
                "502": _error("`embedding_failed`: the provider answered no usable vector"),
                "503": retry_error("`embedding_unavailable`: the provider cannot embed the query now"),
            },
        },
    },
}
