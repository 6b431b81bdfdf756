"""The test proxy itself: a cut drops every connection, including one accepted as the cut began."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentos.testing.tcp_proxy import TcpProxy


@asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return await asyncio.get_running_loop().sock_recv(sock, 1) == b""
    except ConnectionResetError:
        return True


async def test_a_relay_carries_bytes_both_ways_until_a_cut() -> None:
    async with echo_server() as port, TcpProxy("127.0.0.1", port) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        await proxy.cut()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        try:
            await asyncio.open_connection("127.0.0.1", proxy.port)
            raise AssertionError("a cut proxy took a connection")
        except ConnectionRefusedError:
            pass


async def test_a_connection_accepted_as_a_cut_begins_is_dropped_not_leaked() -> None:
    # The clean-clone CI's failure: the stdlib loop accepts a connection in one callback and
    # builds its transport a pass later; a cut closing the server in between left that socket to
    # the garbage collector (a ResourceWarning in whichever test ran then).
    loop = asyncio.get_running_loop()
    leaked: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, leaked.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            async with echo_server() as port, TcpProxy("127.0.0.1", port) as proxy:
                # Loopback completes the handshake at once: the next pass sees it to accept.
                client = socket.create_connection(("127.0.0.1", proxy.port))
                client.setblocking(False)
                cut: asyncio.Future[asyncio.Task[None]] = loop.create_future()
                # Queued ahead of that pass's accept: the cut's first step runs before the
                # accepted connection's transport is built.
                loop.call_soon(lambda: cut.set_result(loop.create_task(proxy.cut())))
                await asyncio.wait_for(await cut, 5)
                assert await asyncio.wait_for(closed_by_peer(client), 5)
                client.close()
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert leaked == [], [(u.exc_value, u.object) for u in leaked]
