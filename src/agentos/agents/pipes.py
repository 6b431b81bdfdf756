"""The output pipes of a sandboxed command, read on the event loop.

Usage::

    async with Output(stdout_fd, max_bytes) as out:
        ...                       # the command runs
        await drain(out)          # EOF, or give up on a pipe an escaped process holds open
    out.text(), out.truncated
"""

from __future__ import annotations

import asyncio
import contextlib
import os

_READ_CHUNK = 65_536
_DRAIN_AFTER_EXIT_S = 2.0  # output still open this long after the kill came from an escaped process


class Output:
    """One output pipe of a command, read on the loop, keeping the first `max_bytes`."""

    def __init__(self, fd: int, max_bytes: int) -> None:
        self._fd = fd
        self._max_bytes = max_bytes
        self._kept = bytearray()
        self.truncated = False
        self.task: asyncio.Task[None] | None = None
        self._transport: asyncio.ReadTransport | None = None

    async def __aenter__(self) -> Output:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_READ_CHUNK)
        pipe = os.fdopen(self._fd, "rb", buffering=0)
        self._transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        self.task = asyncio.ensure_future(self._read(reader))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.task is not None and self._transport is not None
        if not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self._transport.close()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """Keep the head, drain the rest so the child never blocks on a full pipe."""
        while chunk := await reader.read(_READ_CHUNK):
            room = self._max_bytes - len(self._kept)
            if len(chunk) > room:
                self.truncated = True
            self._kept += chunk[: max(room, 0)]

    def text(self) -> str:
        text = self._kept.decode("utf-8", errors="replace")
        return text + "\n[output truncated]" if self.truncated else text


async def drain(*outputs: Output) -> None:
    """Wait for the pipes' EOF; a process that left the group may hold them open: stop waiting."""
    tasks = [o.task for o in outputs if o.task is not None]
    _, pending = await asyncio.wait(tasks, timeout=_DRAIN_AFTER_EXIT_S)
    for output in outputs:
        if output.task in pending:
            output.truncated = True
