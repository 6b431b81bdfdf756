"""The server's side of the sandbox fork server (`_zygote.py`): spawn and wait without blocking.

Usage::

    forks = ForkServer()
    pid = await forks.spawn(request, stdout_fd, stderr_fd)   # the fds are sent, then closed here
    exit_code = await forks.wait(pid)
    await forks.close()

The zygote is started on first use and again after it dies (pending calls then fail with
`ConnectionError`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import itertools
import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ZYGOTE = str(Path(__file__).with_name("_zygote.py"))
_MESSAGE_MAX = 1 << 16


@dataclass(frozen=True, slots=True)
class ForkServerStatistics:
    spawned: int
    running: int
    restarts: int
    ready: int = 0  # ready sandboxes waiting for a command (`_ready.py`)
    ready_size: int = 0  # how many the fork server keeps (0: none, or disabled after failures)
    from_ready: int = 0  # commands started in a ready sandbox


class ForkServer:
    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ids = itertools.count(1)
        self._started: dict[int, asyncio.Future[int]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._spawned = 0
        self._restarts = -1
        self._send_lock = asyncio.Lock()
        self._pool: dict[str, Any] | None = None
        self._pool_unsent = False
        self._ready, self._ready_size, self._from_ready = 0, 0, 0
        self._ready_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def statistics(self) -> ForkServerStatistics:
        return ForkServerStatistics(
            spawned=self._spawned,
            running=len(self._exits),
            restarts=max(self._restarts, 0),
            ready=self._ready,
            ready_size=self._ready_size,
            from_ready=self._from_ready,
        )

    async def keep_ready(self, namespaces: list[str], size: int, tmp_mb: int) -> None:
        """Keep `size` ready sandboxes for commands confined with `namespaces`, identity by
        setuid, a `/tmp` of `tmp_mb` (`_ready.py`); also after the fork server restarts."""
        self._pool = {"pool": {"namespaces": namespaces, "size": size, "tmp_mb": tmp_mb}}
        self._pool_unsent = True
        await self._send_pool(self._sock or self._start())

    async def wait_ready(self, count: int) -> None:
        """Until `count` ready sandboxes wait (callers bound it with a timeout)."""
        if self._ready >= count:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready_waiters.append((count, waiter))
        await waiter

    async def spawn(self, request: dict[str, Any], stdout_fd: int, stderr_fd: int) -> int:
        """Start a command; returns its pid (also its process group id).

        Raises:
            ConnectionError: the fork server died.
        """
        request_id = next(self._ids)
        fds = array.array("i", [stdout_fd, stderr_fd])
        message = json.dumps({**request, "id": request_id}).encode()
        for attempt in (1, 2):
            sock = self._sock or self._start()
            try:
                await self._send_pool(sock)
                await self._send(sock, message, [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                break
            except OSError as exc:  # it died since we last heard from it: start another, once
                self._detach(ConnectionError(f"the sandbox fork server is gone: {exc}"))
                if attempt == 2:
                    raise ConnectionError(f"the sandbox fork server cannot start: {exc}") from exc
        # No await since the send: its answer cannot have been dispatched yet.
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._started[request_id] = started
        self._spawned += 1
        return await started

    async def wait(self, pid: int) -> int:
        """The exit code of `pid` (negative: the signal that killed it)."""
        future = self._exits.get(pid)
        if future is None:
            raise ConnectionError(f"process {pid} is unknown to the fork server")
        try:
            return await asyncio.shield(future)
        finally:
            if future.done() and self._exits.get(pid) is future:  # the pid may already be someone else's
                del self._exits[pid]

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        self._detach(ConnectionError("the fork server is closed"))  # EOF on its socket: it exits
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, 5.0)

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            # No preexec_fn here, so this spawn can use vfork: cheap even from a large server.
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _ZYGOTE, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        ours.setblocking(False)
        asyncio.get_running_loop().add_reader(ours, self._on_readable)
        self._sock = ours
        self._restarts += 1
        self._pool_unsent = self._pool is not None
        return ours

    async def _send_pool(self, sock: socket.socket) -> None:
        if self._pool_unsent and self._pool is not None:
            self._pool_unsent = False
            await self._send(sock, json.dumps(self._pool).encode(), [])

    async def _send(self, sock: socket.socket, message: bytes, ancillary: list[Any]) -> None:
        # One sender at a time: a full socket buffer parks the sender on the loop's writer
        # callback, and an fd has only one of those.
        async with self._send_lock:
            while True:
                try:
                    sock.sendmsg([message], ancillary)
                    return
                except BlockingIOError:
                    await _writable(sock)

    def _on_readable(self) -> None:
        sock = self._sock
        while sock is not None and sock is self._sock:
            try:
                data = sock.recv(_MESSAGE_MAX)
            except BlockingIOError:
                return
            except OSError as exc:
                self._detach(ConnectionError(f"the sandbox fork server failed: {exc}"))
                return
            if not data:
                self._detach(ConnectionError("the sandbox fork server exited"))
                return
            self._dispatch(json.loads(data))

    def _dispatch(self, message: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        if "pool" in message:
            self._pool_state(int(message["pool"]["ready"]), int(message["pool"]["size"]))
            return
        if "id" in message:
            self._from_ready += bool(message.get("ready"))
            pid = int(message["pid"])
            self._exits[pid] = loop.create_future()
            started = self._started.pop(int(message["id"]), None)
            if started is not None and not started.done():
                started.set_result(pid)
            return
        exited = self._exits.get(int(message["pid"]))
        if exited is not None and not exited.done():
            exited.set_result(int(message["exit_code"]))

    def _pool_state(self, ready: int, size: int) -> None:
        self._ready, self._ready_size = ready, size
        waiting = []
        for count, waiter in self._ready_waiters:
            if ready >= count and not waiter.done():
                waiter.set_result(None)
            elif not waiter.done():
                waiting.append((count, waiter))
        self._ready_waiters = waiting

    def _detach(self, error: Exception) -> None:
        """Forget the current zygote; fail whoever waits on it."""
        self._ready = 0
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock)
            self._sock.close()
        self._sock = None
        for future in [*self._started.values(), *self._exits.values()]:
            if not future.done():
                future.set_exception(error)
                future.exception()  # a waiter still gets it; nobody waiting is no "never retrieved" log
        self._started.clear()
        self._exits.clear()


async def _writable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    writable: asyncio.Future[None] = loop.create_future()
    loop.add_writer(sock, writable.set_result, None)
    try:
        await writable
    finally:
        loop.remove_writer(sock)
