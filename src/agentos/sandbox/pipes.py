"""The output pipes of a sandboxed command, read on the event loop.

Usage::

    async with Output(stdout_fd, max_bytes) as out:
        ...                       # the command runs
        await drain(out)          # EOF, or give up on a pipe an escaped process holds open
    out.text(), out.truncated

Each pipe is read with `loop.add_reader` and closed here, exactly once. Not with
`loop.connect_read_pipe`: under uvloop that closes the descriptor twice (libuv, then the file
object; MagicStack/uvloop#763), and a number the kernel reused in between belongs to someone
else by then: seen here as `SQLITE_IOERR_RDLOCK` on `runs.db`, opened by another thread right
after the sandbox's start-up probe ran a command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

_READ_CHUNK = 65_536
_DRAIN_AFTER_EXIT_S = 2.0  # output still open this long after the kill came from an escaped process


class Output:
    """One output pipe of a command, read on the loop, keeping the first `max_bytes`. Owns `fd`:
    it is closed when the block ends (also when entering it fails)."""

    def __init__(self, fd: int, max_bytes: int) -> None:
        self._fd = fd
        self._max_bytes = max_bytes
        self._kept = bytearray()
        self.truncated = False
        self.task: asyncio.Future[None] | None = None  # done at EOF
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> Output:
        loop = self._loop = asyncio.get_running_loop()
        self.task = loop.create_future()
        try:
            os.set_blocking(self._fd, False)
            loop.add_reader(self._fd, self._on_readable)
        except BaseException:
            self._close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._close()

    def _on_readable(self) -> None:
        """Keep the head, drain the rest so the child never blocks on a full pipe."""
        while True:
            try:
                chunk = os.read(self._fd, _READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return  # nothing more for now
            except OSError:
                chunk = b""  # a broken pipe reads as its end
            if not chunk:
                self._stop_reading()
                if self.task is not None and not self.task.done():
                    self.task.set_result(None)
                return
            room = self._max_bytes - len(self._kept)
            if len(chunk) > room:
                self.truncated = True
            self._kept += chunk[: max(room, 0)]

    def _stop_reading(self) -> None:
        if self._loop is not None and self._fd >= 0:
            self._loop.remove_reader(self._fd)

    def _close(self) -> None:
        if self._fd < 0:
            return
        self._stop_reading()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1  # closed once: a later close must not hit a number reused since
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def text(self) -> str:
        text = self._kept.decode("utf-8", errors="replace")
        return text + "\n[output truncated]" if self.truncated else text


async def drain(*outputs: Output) -> None:
    """Wait for the pipes' EOF; a process that left the group may hold them open: stop waiting."""
    tasks = [o.task for o in outputs if o.task is not None]
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=_DRAIN_AFTER_EXIT_S)
    for output in outputs:
        if output.task in pending:
            output.truncated = True
