"""A TCP proxy on a loopback port that a test can cut and restore: a database that goes away.

Theory of operation. `start()` listens on 127.0.0.1 and an ephemeral port and relays every
accepted connection to the target, byte for byte, in both directions. `cut()` stops listening
(new connections are refused: ECONNREFUSED) and aborts every relayed connection (the client
sees its connection drop, as when the database host goes away). `restore()` listens again on
the same port, so a client configured with the proxy's address reconnects by itself.
`cut_when(needle)` times a cut: the first time a client sends bytes containing `needle` (a
statement's text, `COMMIT`, `LISTEN`), those bytes are dropped and everything is cut at once, so
the operation that sent them is the one in the middle when the database goes away.
`stall()` is the nastier fault: connections stay open but nothing moves, in either direction,
and new ones are accepted and never answered (a host that vanished without a reset); the
client's own timeouts are all that end its waits. `restore()` drops the stalled connections.
The target itself is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from asyncio.selector_events import BaseSelectorEventLoop
from collections.abc import Callable
from typing import Any


class TcpProxy:
    """`async with TcpProxy(host, port) as proxy:` relays 127.0.0.1:`proxy.port` to host:port."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # Relays still connecting to the target: a cut cancels them too, so that none is left
        # pending (its sockets unclosed) when the test's loop closes.
        self._connecting: set[asyncio.Task[Any]] = set()
        self.port = 0
        self._stalled = False
        self.accepted = 0  # connections relayed so far
        self._needle: bytes | None = None
        self._cutter: asyncio.Task[None] | None = None
        self._cuts = 0  # cuts so far: a relay that was connecting across one is dropped too
        self.timed_cut = asyncio.Event()  # set when a `cut_when` cut happened

    async def __aenter__(self) -> TcpProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cut()

    async def start(self) -> None:
        """Listen (on a new ephemeral port the first time, on the same port afterwards)."""
        # Each listening binds the cuts so far: a connection it accepted relays only if no cut came
        # since, however late its relay starts.
        relay = functools.partial(self._relay, self._cuts)
        self._server = await asyncio.start_server(relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Refuse new connections and drop the relayed ones (and those still connecting)."""
        self._cuts += 1
        if self._server is not None:
            server, self._server = self._server, None
            await _stop_accepting(server)
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        tasks = [*self._tasks, *self._connecting]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def cut_when(self, needle: bytes) -> None:
        """Cut (as `cut()`) the moment a client sends bytes containing `needle`; those bytes never
        reach the target. `timed_cut` is set once it has happened."""
        self.timed_cut.clear()
        self._needle = needle

    async def stall(self) -> None:
        """Keep every connection open but relay nothing; accept new ones and leave them hanging."""
        self._stalled = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def restore(self) -> None:
        """Relay again: after `cut()`, listen again on the same port; after `stall()`, drop the
        stalled connections so that clients reconnect."""
        if self._stalled:
            self._stalled = False
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()
        if self._server is None:
            await self.start()

    async def _relay(self, cuts: int, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if cuts != self._cuts:  # accepted just before a cut, relayed after it: the cut drops it
            client_writer.transport.abort()
            return
        if self._stalled:
            self._writers.add(client_writer)  # held open, never answered
            return
        relay = asyncio.current_task()
        assert relay is not None
        self._connecting.add(relay)
        try:
            target_reader, target_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            return
        except asyncio.CancelledError:  # by a cut (open_connection closed its own socket)
            client_writer.transport.abort()
            raise
        finally:
            self._connecting.discard(relay)
        if cuts != self._cuts:  # a cut came while this one was connecting: it must not outlive it
            client_writer.transport.abort()
            target_writer.transport.abort()
            return
        self._writers.update((client_writer, target_writer))
        for reader, writer, watched in ((client_reader, target_writer, True), (target_reader, client_writer, False)):
            task = asyncio.get_running_loop().create_task(_copy(reader, writer, self._watch if watched else None))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _watch(self, data: bytes) -> bool:
        """Whether `data` (from a client) must not pass: it holds the armed needle, and the cut
        has begun (in a task of its own: this copy task is one of those it cancels)."""
        if self._needle is None or self._needle not in data:
            return False
        self._needle = None
        self._cutter = asyncio.get_running_loop().create_task(self._timed_cut())  # held: not a relay task
        return True

    async def _timed_cut(self) -> None:
        await self.cut()
        self.timed_cut.set()


async def _stop_accepting(server: asyncio.Server) -> None:
    """Take no more connections, and let those just taken get their transports before `close()`.

    CPython's selector loop accepts a connection in one callback and builds its transport in a
    task that runs a loop pass later; a `close()` in between trips that task on `Server._attach`'s
    assertion, which it swallows, and the half-built transport's socket is left to the garbage
    collector (a ResourceWarning, failing whichever test was running). Only that loop is waited
    for: uvloop accepts by a path of its own, with no such gap known.
    """
    loop = asyncio.get_running_loop()
    if not isinstance(loop, BaseSelectorEventLoop):
        return
    for sock in server.sockets:
        loop.remove_reader(sock.fileno())
    await asyncio.sleep(0)  # one pass: the transports of connections already accepted attach


async def _copy(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop: Callable[[bytes], bool] | None = None
) -> None:
    """Relay until either side closes (or `stop` refuses a chunk); then close the other side too."""
    # OSError: a side reset; RuntimeError: uvloop's write to a transport a cut just closed.
    # (Cancelled by stall(): the sockets stay open.)
    with contextlib.suppress(OSError, RuntimeError):
        while data := await reader.read(65536):
            if stop is not None and stop(data):
                return  # the timed cut aborts both sides
            writer.write(data)
            await writer.drain()
    writer.transport.abort()
