"""Reading an uploaded document: a JSON body, or the document itself as the body.

A document may be larger than `server.max_body_bytes` (1 MB by default: a PDF often is), so
the body is read (`agentos.api.body_encoding.read_raw`) up to `knowledge.max_document_bytes`: a declared
Content-Length over the cap is refused before anything is read, and a body that grows past it
while it is read (chunked, lying about its length, or inflating from gzip) is refused at that
point, never read whole into memory.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from agentos.api.body import decode_json, header_text
from agentos.api.body_encoding import read_raw
from agentos.config.knowledge import KnowledgeConfig
from agentos.errors import BadRequest, InvalidInput, PayloadTooLarge, UnsupportedMediaType
from agentos.knowledge.extract import SUPPORTED_TYPES
from agentos.knowledge.inputs import MAX_IDEMPOTENCY_KEY, MAX_TITLE_CHARS, TEXT_TYPES, DocumentUpload, document_metadata

JSON_OVERHEAD = 1 << 16  # the JSON around a document: title, metadata, keys
_KEY = re.compile(rf"^[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}$")


@dataclass(frozen=True, slots=True)
class Upload:
    content: bytes
    content_type: str
    title: str
    metadata: dict[str, Any]
    idempotency_key: str | None


async def read_upload(request: web.Request, config: KnowledgeConfig) -> Upload:
    """The document of an upload request.

    Raises:
        PayloadTooLarge: over `knowledge.max_document_bytes`.
        UnsupportedMediaType: a Content-Type that is no document type and not JSON.
        BadRequest: malformed JSON, bad base64, a malformed Agentos-Metadata header.
        InvalidInput: wrong fields, an empty document, a bad Idempotency-Key.
    """
    key = idempotency_key(request)
    kind = request.content_type.lower()
    if kind == "application/json":
        limit = config.max_document_bytes * 4 // 3 + JSON_OVERHEAD  # base64 is 4/3 of the bytes
        body = decode_json(await read_raw(request, limit), DocumentUpload)
        content, content_type = _json_content(body)
        upload = Upload(content, content_type, body.title, document_metadata(body.metadata), key)
    elif kind in SUPPORTED_TYPES:
        content = await read_raw(request, config.max_document_bytes)
        upload = Upload(content, kind, _title_header(request), _metadata_header(request), key)
    else:
        types = ", ".join((*SUPPORTED_TYPES, "application/json"))
        raise UnsupportedMediaType(f"Content-Type {kind[:100]!r} is not a document type: one of {types}")
    if len(upload.content) > config.max_document_bytes:
        raise PayloadTooLarge(f"the document is over {config.max_document_bytes} bytes")
    if not upload.content.strip():
        raise InvalidInput("the document is empty", code="empty_document")
    return upload


def idempotency_key(request: web.Request) -> str | None:
    raw = header_text(request, "Idempotency-Key")
    if raw is None:
        return None
    if not _KEY.match(raw):
        raise InvalidInput(f"Idempotency-Key: 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters, no spaces")
    return raw


def _json_content(body: DocumentUpload) -> tuple[bytes, str]:
    kind = body.content_type.lower()
    if kind not in SUPPORTED_TYPES:
        raise UnsupportedMediaType(f"content_type {kind[:100]!r}: one of {', '.join(SUPPORTED_TYPES)}")
    if (body.content is None) == (body.content_base64 is None):
        raise InvalidInput("give exactly one of content (text) and content_base64")
    if body.content is not None:
        if kind not in TEXT_TYPES:
            raise InvalidInput(f"content is text; a {kind} document goes in content_base64")
        return body.content.encode(), kind
    assert body.content_base64 is not None
    try:
        return base64.b64decode(body.content_base64, validate=True), kind
    except (binascii.Error, ValueError):
        raise BadRequest("content_base64: not valid base64", code="malformed_base64") from None


def _title_header(request: web.Request) -> str:
    title = header_text(request, "Agentos-Title") or ""
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidInput(f"Agentos-Title: at most {MAX_TITLE_CHARS} characters")
    return title


def _metadata_header(request: web.Request) -> dict[str, Any]:
    raw = header_text(request, "Agentos-Metadata")
    if raw is None:
        return {}
    try:
        decoded = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested deeper than msgspec goes
        raise BadRequest("Agentos-Metadata: not a JSON object", code="malformed_json") from None
    return document_metadata(decoded)  # flat: one level of scalars
