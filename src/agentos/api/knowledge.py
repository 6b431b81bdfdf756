"""Knowledge routes: collections, documents, queries (docs/knowledge.md).

The tenant is always the key's (`require`); a collection or document of another tenant is a
404 exactly like a missing one. An upload answers 202 only once the document is committed
durably; the indexer works on it afterwards, and its state is read with GET.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp import web

from agentos.api.body import NOT_BLANK, page_limit, query_text, read_body
from agentos.api.keys import KNOWLEDGE
from agentos.api.knowledge_upload import read_upload
from agentos.api.routes import (
    BAD_BODY,
    Answer,
    Schema,
    header,
    json,
    listing,
    nullable,
    page,
    refines,
    retry,
    tagged,
)
from agentos.api.sessions import json_response, page_response
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
from agentos.knowledge.service import KnowledgeService
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()
operation = tagged("knowledge")

DOCUMENTS_PAGE = 100

# The bounds the server checks beyond the structs' (`agentos.knowledge.inputs`), at the defaults of
# `[knowledge]` (a deployment may set its own max_dimensions and max_top_k).
_DEFAULTS = KnowledgeConfig()
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


@refines("CollectionCreate")
def _collection_checks(schemas: dict[str, Any]) -> None:
    properties = schemas["CollectionCreate"]["properties"]
    properties["dimensions"]["maximum"] = _DEFAULTS.max_dimensions
    properties["chunk_tokens"]["anyOf"][0]["maximum"] = MAX_CHUNK_TOKENS
    properties["chunk_overlap"]["anyOf"][0]["maximum"] = MAX_CHUNK_TOKENS - 1  # below the chunk, at most


@refines("QueryRequest")
def _query_checks(schemas: dict[str, Any]) -> None:
    properties = schemas["QueryRequest"]["properties"]
    properties["top_k"]["maximum"] = _DEFAULTS.max_top_k
    properties["filter"]["anyOf"][0] = _FILTER
    properties["query"]["pattern"] = NOT_BLANK


@refines("DocumentUpload")
def _upload_checks(schemas: dict[str, Any]) -> None:
    properties = schemas["DocumentUpload"]["properties"]
    properties["content_type"] = {"enum": list(SUPPORTED_TYPES)}
    properties["metadata"] |= {
        "maxProperties": 64,
        "propertyNames": _KEYS,
        "additionalProperties": {"anyOf": [_SCALAR, {"type": "null"}]},
        "description": f"at most {MAX_METADATA_BYTES} bytes as JSON",
    }


# The answers, as `agentos.knowledge.records` writes them (`to_dict`).
_STRING = {"type": "string"}
_INT = {"type": "integer"}
_METADATA = {
    "type": "object",
    "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
    "description": "flat: keys of 1-64 of A-Z a-z 0-9 _ . -, scalar values; at most 8 KiB as JSON",
}


_COLLECTION = Schema.object(
    "Collection",
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
    },
)
_DOCUMENT = Schema.object(
    "Document",
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
        "reason": {**nullable("string"), "description": "why it failed"},
        "chunks": _INT,
        "created_ms": _INT,
        "updated_ms": _INT,
    },
)
_HIT = Schema.object(
    "Hit",
    {
        "document_id": _STRING,
        "chunk_id": _INT,
        "ordinal": {**_INT, "description": "the chunk's position in its document, from 0"},
        "text": _STRING,
        "score": {"type": "number", "description": "reciprocal rank fusion of the vector and full-text ranks"},
        "title": _STRING,
        "metadata": _METADATA,
    },
)
_RESULTS = Schema.object("QueryResults", {"results": {"type": "array", "items": _HIT.ref}}, uses=(_HIT,))
_LOCATION = {"Location": {"description": "where to read it", "schema": _STRING}}
_UPLOAD_HEADERS = (
    header(
        "Idempotency-Key",
        "the same key with the same content answers the same document; with other content, 409",
        {"type": "string", "pattern": f"^[\\x21-\\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}$"},
    ),
    header(
        "Agentos-Title",
        "the title of a document sent as the body itself",
        {"type": "string", "maxLength": MAX_TITLE_CHARS},
    ),
    header("Agentos-Metadata", "the metadata (a JSON object) of a document sent as the body itself"),
)
_RAW_TYPES: dict[str, Any] = {
    **{t: {"schema": {"type": "string"}} for t in TEXT_TYPES},
    "application/pdf": {"schema": {"type": "string", "format": "binary"}},
}
_NO_COLLECTION = {404: "Unknown collection"}
_NO_DOCUMENT = {404: "Unknown collection or document"}
_DELETED = {204: Answer(description="Deleted")}


def _service(request: web.Request, scope: Scope) -> tuple[KnowledgeService, str]:
    who = require(request, scope)
    return request.app[KNOWLEDGE], who.tenant_id


def _location(name: str, document_id: str = "") -> str:
    path = f"/v1/collections/{quote(name, safe='')}"
    return f"{path}/documents/{quote(document_id, safe='')}" if document_id else path


@routes.post("/v1/collections")
@operation(
    "Create a collection; its embedding model and dimensions are pinned",
    body=CollectionCreate,
    answers={201: json("The collection", _COLLECTION, _LOCATION)},
    errors=BAD_BODY | {409: "`collection_exists`, or `too_many_collections` (knowledge.max_collections)"},
)
async def create_collection(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    body = await read_body(request, CollectionCreate)
    collection = await service.create_collection(tenant, body)
    response = json_response(collection.to_dict(), status=201)
    response.headers["Location"] = _location(collection.name)
    return response


@routes.get("/v1/collections")
@operation(
    "List the tenant's collections",
    answers={200: json("The collections, by name", page("CollectionPage", _COLLECTION))},
)
async def list_collections(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    found = await service.list_collections(tenant)
    return json_response({"data": [c.to_dict() for c in found], "next_cursor": None})


@routes.get("/v1/collections/{name}")
@operation(
    "Read a collection, with its document and chunk counts",
    answers={200: json("The collection", _COLLECTION)},
    errors=_NO_COLLECTION,
)
async def get_collection(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    return json_response((await service.get_collection(tenant, request.match_info["name"])).to_dict())


@routes.delete("/v1/collections/{name}")
@operation("Delete a collection with its documents and chunks", answers=_DELETED, errors=_NO_COLLECTION)
async def delete_collection(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    await service.delete_collection(tenant, request.match_info["name"])
    return web.Response(status=204)


@routes.post("/v1/collections/{name}/documents")
@operation(
    "Upload a document; 202 once it is committed durably, indexed in the background",
    parameters=_UPLOAD_HEADERS,
    body=DocumentUpload,
    body_content=_RAW_TYPES,
    body_description="JSON, or the document itself with its Content-Type (and the Agentos-* headers)",
    answers={
        202: json(
            "Accepted: the document (queued; an idempotent replay: its state now)",
            _DOCUMENT,
            _LOCATION | {"Idempotent-Replayed": {"description": "true: an earlier upload's", "schema": _STRING}},
        )
    },
    errors=_NO_COLLECTION
    | {
        400: "Malformed JSON, base64 or Agentos-Metadata; a header sent twice or not UTF-8",
        409: "`idempotency_key_reused` (other content), `too_many_documents`",
        413: "Over knowledge.max_document_bytes",
        415: "`unsupported_media_type`",
        422: "Wrong fields, an empty document, bad metadata or Idempotency-Key",
    },
)
async def add_document(request: web.Request) -> web.Response:
    """202 once the document is committed; an Idempotency-Key replay answers the same
    document (its state now) with `Idempotent-Replayed: true`."""
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    name = request.match_info["name"]
    await service.get_collection(tenant, name)  # 404 before the body is read
    upload = await read_upload(request, service.config)
    document, replayed = await service.accept_document(
        tenant,
        name,
        upload.content,
        upload.content_type,
        title=upload.title,
        metadata=upload.metadata,
        idempotency_key=upload.idempotency_key,
    )
    response = json_response(document.to_dict(name), status=202)
    response.headers["Location"] = _location(name, document.document_id)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@routes.get("/v1/collections/{name}/documents")
@operation(
    "List the collection's documents, by id",
    **listing("A page of documents", "DocumentPage", _DOCUMENT, DOCUMENTS_PAGE),
    errors=_NO_COLLECTION | {422: "A bad limit"},
)
async def list_documents(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    name = request.match_info["name"]
    limit = page_limit(request, DOCUMENTS_PAGE)
    found = await service.list_documents(tenant, name, limit=limit, after=query_text(request, "after"))
    return page_response(found, limit, lambda d: d.to_dict(name), lambda d: d.document_id)


@routes.get("/v1/collections/{name}/documents/{document_id}")
@operation(
    "Read a document and its state (queued, indexing, ready, failed with a reason)",
    answers={200: json("The document", _DOCUMENT)},
    errors=_NO_DOCUMENT,
)
async def get_document(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    name = request.match_info["name"]
    _, document = await service.get_document(tenant, name, request.match_info["document_id"])
    return json_response(document.to_dict(name))


@routes.delete("/v1/collections/{name}/documents/{document_id}")
@operation("Delete a document and its chunks", answers=_DELETED, errors=_NO_DOCUMENT)
async def delete_document(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    await service.delete_document(tenant, request.match_info["name"], request.match_info["document_id"])
    return web.Response(status=204)


@routes.post("/v1/collections/{name}/query")
@operation(
    "Hybrid retrieval: vector and full-text search with the filter inside, fused by rank",
    body=QueryRequest,
    answers={200: json("The best chunks, best first", _RESULTS)},
    errors=BAD_BODY
    | _NO_COLLECTION
    | {
        502: "`embedding_failed`: the provider answered no usable vector",
        503: retry("`embedding_unavailable`: the provider cannot embed the query now"),
    },
)
async def query(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    body = await read_body(request, QueryRequest)
    hits = await service.query(
        tenant, request.match_info["name"], body.query, top_k=body.top_k, metadata_filter=body.filter
    )
    return json_response({"results": [hit.to_dict() for hit in hits]})
