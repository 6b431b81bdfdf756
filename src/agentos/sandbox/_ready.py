"""Ready sandboxes: processes confined ahead of time, each waiting for one command (stdlib only).

Loaded by the fork server (`_zygote.py`) from its own directory. Most of a command's set-up
does not depend on the command: the clone into its namespaces and the part of its root that
every command shares (`_mountns.ready_root`). A ready sandbox has done all of that and waits on
its own socket. The fork server makes them one at a time, and only after `_QUIET_S` without a
request (making one takes the kernel's mount locks that starting commands need). A request
then costs only what is the command's own: its stdout and stderr, its workspace (a detached
copy of the host's, made by the fork server with `open_tree` and attached with `move_mount`:
two light mount calls instead of a root built and a host tree detached, under the kernel's
one mount lock that every sandbox starting at once shares), its root made read-only, and
`_confine.lock_down` (limits, Landlock, identity, no new privileges): the same end state, and
the same steps after the root, as a command started fresh. Each serves one command, never two.

Only for the shape the server announces (its namespaces, identity by `setuid`: a server that
runs as root); under a user namespace each command's uid map is written before anything
else, so every command is started fresh. A ready sandbox whose set-up fails exits; after
`_FAILURES_MAX` of those in a row without one that became ready, the pool is disabled (a line
on stderr says why) and every command is started fresh.
"""

from __future__ import annotations

import array
import collections
import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

import _confine  # type: ignore[import-not-found]  # a sibling script, on sys.path by its directory
import _mountns  # type: ignore[import-not-found]  # a sibling script, on sys.path by its directory

_FAILURES_MAX = 3


class Pool:
    """The fork server's ready sandboxes: made by `fill`, handed out by `take`."""

    def __init__(self, namespaces: list[str], size: int, tmp_mb: int, selector: selectors.BaseSelector) -> None:
        self.namespaces, self.size, self.tmp_mb = namespaces, size, tmp_mb
        self._selector = selector
        self._ready: collections.OrderedDict[int, socket.socket] = collections.OrderedDict()
        self._preparing: dict[int, socket.socket] = {}
        self._failures = 0

    @property
    def ready(self) -> int:
        return len(self._ready)

    def wanted(self) -> bool:
        """One more should be made: below `size`, and none is being made (one at a time)."""
        return self.size > 0 and not self._preparing and len(self._ready) < self.size

    def fits(self, request: dict[str, Any]) -> bool:
        identity = request.get("identity") or {}
        return (
            self.size > 0
            and not request.get("probe")
            and request["namespaces"] == self.namespaces
            and identity.get("how") == "setuid"
        )

    def fds(self) -> list[int]:
        """The pool's sockets: a child of the fork server closes them (each ready sandbox must
        see its socket close when the fork server ends)."""
        return [sock.fileno() for sock in (*self._ready.values(), *self._preparing.values())]

    def fill(self, close_in_child: list[int]) -> None:
        """Start one more ready sandbox; `close_in_child`: the fork server's own fds."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = _confine.clone_into(self.namespaces)
        except OSError as exc:
            ours.close()
            theirs.close()
            self._failed(f"clone: {exc}")
            return
        if pid == 0:
            for fd in [ours.fileno(), *close_in_child, *self.fds()]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            _member(theirs, self.namespaces, self.tmp_mb)
        theirs.close()
        self._preparing[pid] = ours
        self._selector.register(ours, selectors.EVENT_READ, ("member", pid))

    def on_readable(self, pid: int) -> bool:
        """A ready sandbox said it is ready (True), or its socket closed."""
        sock = self._preparing.pop(pid, None)
        if sock is None:
            return False
        self._selector.unregister(sock)
        try:
            said = sock.recv(16)
        except OSError:
            said = b""
        if said != b"ready":
            sock.close()  # it exits, or has: `reaped` counts it
            return False
        self._ready[pid] = sock
        self._failures = 0
        return True

    def take(self) -> tuple[int, socket.socket] | None:
        """The oldest ready sandbox (its pid, which is its process group's, and its socket)."""
        if not self._ready:
            return None
        return self._ready.popitem(last=False)

    def reaped(self, pid: int) -> bool:
        """True when `pid` was one of the pool's (it ended before it served a command)."""
        sock = self._preparing.pop(pid, None)
        if sock is not None:
            self._selector.unregister(sock)
            self._failed("it ended before it was ready")
        else:
            sock = self._ready.pop(pid, None)
        if sock is None:
            return False
        sock.close()
        return True

    def _failed(self, why: str) -> None:
        self._failures += 1
        if self._failures >= _FAILURES_MAX:
            self.size = 0
            os.write(
                2,
                f"sandbox: {_FAILURES_MAX} ready sandboxes in a row failed ({why}): every command "
                "is started fresh\n".encode(),
            )

    def close(self) -> None:
        for pid, sock in [*self._ready.items(), *self._preparing.items()]:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self._ready.clear()
        self._preparing.clear()
        self.size = 0


def with_workspace(request: dict[str, Any], fds: array.array[int]) -> array.array[int]:
    """`fds` (stdout, stderr) and, with a mount namespace, a detached copy of the request's
    workspace (`_mountns.clone_workspace`; the caller closes it).

    Raises:
        OSError: the workspace cannot be copied (it is missing, say).
    """
    sent = array.array("i", fds)
    if "mount" in request["namespaces"]:
        sent.append(_mountns.clone_workspace(request["cwd"]))
    return sent


def hand_out(sock: socket.socket, data: bytes, fds: array.array[int]) -> None:
    """The request and its fds (`with_workspace`) to a ready sandbox; its socket is closed.

    Raises:
        OSError: the ready sandbox is gone.
    """
    try:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    finally:
        sock.close()


def _member(sock: socket.socket, namespaces: list[str], tmp_mb: int) -> None:
    """In the cloned child, already in its namespaces (PID 1 of its own, with "pid"): get ready,
    wait for one request, run it. Never returns."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _confine.die_with_parent()  # the fork server
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # the scaffold root has no /dev
        pid_namespace = "pid" in namespaces
        if "mount" in namespaces:
            _mountns.ready_root(pid_namespace, tmp_mb)
        sock.send(b"ready")
        data, fds = _confine.receive(sock, 3)
    except ConnectionError:
        os._exit(0)  # the fork server is gone
    except BaseException as exc:
        os.write(2, f"sandbox: a ready sandbox failed its set-up: {exc}\n".encode())
        os._exit(125)
    if not data:
        os._exit(0)  # the fork server closed the pool
    try:
        sock.close()
        request = json.loads(data)
        _confine.stdio(fds[0], fds[1], null)
        for fd in [fds[0], fds[1], null]:
            os.close(fd)
        if "mount" in namespaces:
            mount = request["mount"]
            _mountns.attach_workspace(fds[2], mount["workspace"], mount["tmp_mb"], tmp_mb)
            os.close(fds[2])
        else:
            os.chdir(request["cwd"])
        _confine.lock_down(request, dies_with_parent=True)
    except BaseException as exc:
        os.write(2, f"sandbox set-up failed: {exc}\n".encode())
        os._exit(126)
    _confine.exec_command(request)


if __name__ == "__main__":
    sys.exit("imported by the fork server, never run")
