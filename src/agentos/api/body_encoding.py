"""Request bodies as their `Content-Encoding` says: gzip and deflate inflated as they are read,
never past the route's limit (a gzip bomb costs at most `limit` bytes of memory and of
inflating); anything else refused. aiohttp's parser leaves bodies as sent
(`auto_decompress=False` in `agentos.api.connections.make_runner`),
so this is the only place that inflates one.
"""

from __future__ import annotations

import zlib
from typing import Any

from aiohttp import web
from aiohttp.web import RequestPayloadError

from agentos.api.expect import send_continue
from agentos.errors import BadRequest, PayloadTooLarge, RequestError

CONTENT_ENCODING = "Content-Encoding"
UNREADABLE = "the body could not be read: cut short, or malformed chunks"
READ_CHUNK = 1 << 16
# Content-Encoding -> zlib's wbits. "deflate" is zlib-wrapped (RFC 9110); a raw deflate stream,
# which some senders send under that name, is told apart by its first byte, as aiohttp does.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UnsupportedEncoding(RequestError):
    status = 415
    code = "unsupported_content_encoding"


async def read_raw(request: web.Request, limit: int, what: str = "request body") -> bytes:
    """The body's bytes, decoded as its Content-Encoding says, if it is at most `limit` bytes
    both as sent and once decoded; read from the stream, never more than `limit` at once.

    Raises:
        PayloadTooLarge: a Content-Length over `limit` (before anything is read), or more
            bytes than that sent or decoded (as soon as they are).
        UnsupportedEncoding: a Content-Encoding other than gzip, deflate or identity.
        BadRequest: the body is not what its Content-Encoding says, or ended early (`malformed_body`).
    """
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"{what} over {limit} bytes")
    inflater = _Inflater.of(request.headers.get(CONTENT_ENCODING))
    await send_continue(request)  # every check before the first read has passed
    body = bytearray()
    received = 0
    try:
        async for chunk in request.content.iter_chunked(READ_CHUNK):
            received += len(chunk)
            body += chunk if inflater is None else inflater.inflate(chunk, limit - len(body))
            if received > limit or len(body) > limit:
                raise PayloadTooLarge(f"{what} over {limit} bytes")
    except RequestPayloadError:
        raise BadRequest(UNREADABLE, code="malformed_body") from None
    if inflater is not None:
        inflater.finish()
    return bytes(body)


class _Inflater:
    """One body's zlib decompressor, bounded by the room left under the limit."""

    __slots__ = ("_encoding", "_zlib")

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._zlib: Any = None  # made at the first bytes: "deflate" looks at the first one

    @classmethod
    def of(cls, header: str | None) -> _Inflater | None:
        """None for no encoding (absent, empty, `identity`). Raises: UnsupportedEncoding."""
        if header is None:
            return None
        encoding = header.strip().lower()
        if encoding in ("", "identity"):
            return None
        if encoding not in _WBITS:  # br, zstd, compress, a list of several: not taken
            shown = header[:40].encode("utf-8", "backslashreplace").decode()
            raise UnsupportedEncoding(f"Content-Encoding {shown!r}: one of gzip, deflate, identity")
        return cls(encoding)

    def inflate(self, chunk: bytes, room: int) -> bytes:
        """Up to `room + 1` decoded bytes of `chunk` (one more than fits tells it is too large)."""
        if self._zlib is None:
            wbits = _WBITS[self._encoding]
            if self._encoding == "deflate" and chunk and chunk[0] & 0x0F != 8:
                wbits = -zlib.MAX_WBITS  # raw deflate, no zlib header
            self._zlib = zlib.decompressobj(wbits)
        try:
            # max_length caps what one call makes; a bomb stops here, not after inflating it all
            return bytes(self._zlib.decompress(chunk, max(room, 0) + 1))
        except zlib.error:
            raise self._malformed() from None

    def finish(self) -> None:
        """Raises: BadRequest: the stream was cut short, or data follows its end."""
        if self._zlib is None:
            return  # an empty body
        if not self._zlib.eof or self._zlib.unused_data:
            raise self._malformed()

    def _malformed(self) -> BadRequest:
        return BadRequest(f"the body is not valid {self._encoding} data", code="malformed_body")
