"""Request bodies with a Content-Encoding (issue 14): decoded in one place (`agentos.api.body`),
bounded by the route's limit as sent and once inflated; a body that is not what its encoding
says is a 400, an encoding we do not take a 415, a gzip bomb a 413 without inflating it whole."""

from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib

import aiohttp
import pytest

from agentos.testing import RunningServer
from tests.api.helpers import expect_error
from tests.knowledge.http import create_collection


@pytest.fixture
async def docs(server: RunningServer, http: aiohttp.ClientSession) -> RunningServer:
    await create_collection(http, server.url)
    return server


def gzip_bomb(size: int) -> bytes:
    """`size` zero bytes, gzipped: about a thousandth of that."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join([*(packer.compress(block) for _ in range(size >> 20)), packer.flush()])


@pytest.mark.parametrize(
    ("encoding", "body", "status", "code"),
    [
        ("gzip", b"this is not gzip", 400, "malformed_body"),
        # mtime=0: the test ids hold these bytes, and every xdist worker must collect the same ids
        ("gzip", gzip.compress(b'{"metadata": {}}', mtime=0)[:-8], 400, "malformed_body"),  # cut short
        ("gzip", gzip.compress(b"{}", mtime=0) + b"trailing", 400, "malformed_body"),
        ("deflate", b"nor deflate", 400, "malformed_body"),
        ("br", b"\x8b\x02\x80{}\x03", 415, "unsupported_content_encoding"),
        ("zstd", b"(\xb5/\xfd", 415, "unsupported_content_encoding"),
        ("x-custom", b"{}", 415, "unsupported_content_encoding"),
        ("gzip, gzip", gzip.compress(gzip.compress(b"{}", mtime=0), mtime=0), 415, "unsupported_content_encoding"),
        ("gzip", gzip_bomb(64 << 20), 413, "payload_too_large"),
    ],
)
async def test_a_body_that_is_not_what_its_encoding_says_is_a_4xx(
    docs: RunningServer, http: aiohttp.ClientSession, encoding: str, body: bytes, status: int, code: str
) -> None:
    for path, kind in [("/v1/sessions", "application/json"), ("/v1/collections/docs/documents", "text/plain")]:
        headers = {"Content-Encoding": encoding, "Content-Type": kind}
        tracemalloc.start()
        start = time.perf_counter()
        try:
            async with http.post(docs.url + path, data=body, headers=headers) as r:
                await expect_error(r, status, code)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # the bomb inflates to 64 MB: it is stopped at the route's limit (1 MB, 10 MB), never inflated whole
        assert peak < 24 << 20 and time.perf_counter() - start < 5, (peak, path)


async def test_compressed_bodies_are_decoded(docs: RunningServer, http: aiohttp.ClientSession) -> None:
    body = b'{"metadata": {"k": "v"}}'
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    for encoding, sent in [
        ("gzip", gzip.compress(body)),
        ("x-gzip", gzip.compress(body)),
        ("deflate", zlib.compress(body)),
        ("deflate", raw_deflate.compress(body) + raw_deflate.flush()),  # as some senders send it
        ("identity", body),
        ("GZIP", gzip.compress(body)),
    ]:
        headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
        async with http.post(f"{docs.url}/v1/sessions", data=sent, headers=headers) as r:
            assert r.status == 201, await r.text()
            assert (await r.json())["metadata"] == {"k": "v"}
