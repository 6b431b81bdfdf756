"""Knowledge routes: collections, documents, queries (docs/knowledge.md).

The tenant is always the key's (`require`); a collection or document of another tenant is a
404 exactly like a missing one. An upload answers 202 only once the document is committed
durably; the indexer works on it afterwards, and its state is read with GET.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from agentos.api.body import page_limit, query_text, read_body
from agentos.api.keys import KNOWLEDGE
from agentos.api.knowledge_upload import read_upload
from agentos.api.sessions import json_response
from agentos.knowledge.inputs import CollectionCreate, QueryRequest
from agentos.knowledge.service import KnowledgeService
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()

DOCUMENTS_PAGE = 100


def _service(request: web.Request, scope: Scope) -> tuple[KnowledgeService, str]:
    who = require(request, scope)
    return request.app[KNOWLEDGE], who.tenant_id


def _location(name: str, document_id: str = "") -> str:
    path = f"/v1/collections/{quote(name, safe='')}"
    return f"{path}/documents/{quote(document_id, safe='')}" if document_id else path


@routes.post("/v1/collections")
async def create_collection(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    body = await read_body(request, CollectionCreate)
    collection = await service.create_collection(tenant, body)
    response = json_response(collection.to_dict(), status=201)
    response.headers["Location"] = _location(collection.name)
    return response


@routes.get("/v1/collections")
async def list_collections(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    found = await service.list_collections(tenant)
    return json_response({"data": [c.to_dict() for c in found], "next_cursor": None})


@routes.get("/v1/collections/{name}")
async def get_collection(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    return json_response((await service.get_collection(tenant, request.match_info["name"])).to_dict())


@routes.delete("/v1/collections/{name}")
async def delete_collection(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    await service.delete_collection(tenant, request.match_info["name"])
    return web.Response(status=204)


@routes.post("/v1/collections/{name}/documents")
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
async def list_documents(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    name = request.match_info["name"]
    limit = page_limit(request, DOCUMENTS_PAGE)
    found = await service.list_documents(tenant, name, limit=limit, after=query_text(request, "after"))
    cursor = found[-1].document_id if len(found) == limit else None
    return json_response({"data": [d.to_dict(name) for d in found], "next_cursor": cursor})


@routes.get("/v1/collections/{name}/documents/{document_id}")
async def get_document(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    name = request.match_info["name"]
    _, document = await service.get_document(tenant, name, request.match_info["document_id"])
    return json_response(document.to_dict(name))


@routes.delete("/v1/collections/{name}/documents/{document_id}")
async def delete_document(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_WRITE)
    await service.delete_document(tenant, request.match_info["name"], request.match_info["document_id"])
    return web.Response(status=204)


@routes.post("/v1/collections/{name}/query")
async def query(request: web.Request) -> web.Response:
    service, tenant = _service(request, Scope.KNOWLEDGE_READ)
    body = await read_body(request, QueryRequest)
    hits = await service.query(
        tenant, request.match_info["name"], body.query, top_k=body.top_k, metadata_filter=body.filter
    )
    return json_response({"results": [hit.to_dict() for hit in hits]})
