"""Tokens read from the provider in one read leave for the client in one write.

A saturated server reads several of a stream's tokens at once (3.4 events per read at 1000
turns on a 2-core VM: bench/results/2026-12-07T045346Z-2c-amd-epyc-s15-events-per-read.md);
writing each alone costs a chunk and a `send` per token. The upstream here writes its whole
answer in one piece, so the server reads it at once: the client must get every token in one
HTTP chunk, in order, each its own event with its own id, and the first token must not wait
for anything but that read. An upstream that paces its tokens gets them one chunk each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentos.testing import RunningServer
from tests.api.helpers import SSE, new_session

TOKENS = ["The ", "answer ", "is ", "forty-", "two."]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _answer() -> list[bytes]:
    usage = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(TOKENS), "total_tokens": 3 + len(TOKENS)},
    }
    return [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": t}) for t in TOKENS),
        _chunk({}, "stop"),
        b"data: " + json.dumps(usage).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]


async def _upstream(paced: bool) -> AsyncIterator[str]:
    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if paced:  # each piece once the client has read the one before (a slow provider)
            for piece in _answer():
                await response.write(piece)
                await asyncio.sleep(0.02)
        else:
            await response.write(b"".join(_answer()))  # the whole answer in one write
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def _chunks_of_a_turn(
    server_factory: Callable[..., Awaitable[RunningServer]], http: aiohttp.ClientSession, paced: bool
) -> list[bytes]:
    async for url in _upstream(paced):
        server = await server_factory(url)
        session_id = await new_session(http, server.url)
        chunks: list[bytes] = []
        async with http.post(f"{server.url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE) as r:
            assert r.status == 200, await r.text()
            buffered = b""
            async for data, end_of_chunk in r.content.iter_chunks():
                buffered += data
                if end_of_chunk:
                    chunks.append(buffered)
                    buffered = b""
        return chunks
    raise AssertionError("no upstream")  # pragma: no cover


def _tokens(chunk: bytes) -> list[str]:
    return [json.loads(line[6:])["delta"] for line in chunk.split(b"\n") if line.startswith(b'data: {"delta"')]


@pytest.mark.parametrize("paced", [False, True], ids=["one-read", "paced"])
async def test_tokens_of_one_read_leave_in_one_write(
    server_factory: Callable[..., Awaitable[RunningServer]], http: aiohttp.ClientSession, paced: bool
) -> None:
    chunks = await _chunks_of_a_turn(server_factory, http, paced)
    with_tokens = [_tokens(c) for c in chunks if _tokens(c)]
    assert [t for ts in with_tokens for t in ts] == TOKENS  # every token, in order, once
    text = b"".join(chunks)
    ids = [line for line in text.split(b"\n") if line.startswith(b"id: ")]
    assert len(ids) == len(set(ids))  # each event keeps its own id
    assert text.rstrip().split(b"\n\n")[-1].startswith(b"event: turn.completed")
    if paced:
        assert len(with_tokens) == len(TOKENS)  # read one at a time: written one at a time
    else:
        assert len(with_tokens) == 1  # read at once: written at once
