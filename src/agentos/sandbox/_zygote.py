"""The sandbox's fork server: a small stdlib-only process that starts confined commands.

Run as a script (`python -I -S _zygote.py FD`), never imported by the server. Why a separate
process: confining a command needs code between fork and exec, which makes Python give up
`vfork` and copy the whole server's page tables on every fork, on the event loop's thread.
Forking from this ~10 MB process instead costs a fraction of a millisecond, off the loop.

Protocol, on the SOCK_SEQPACKET socket FD (one datagram per message, JSON):
    server -> zygote  {"id", "argv", "cwd", "env", "rlimits", "namespaces", "identity", "landlock",
                       "mount"?, "probe"?} + SCM_RIGHTS [stdout, stderr]
    server -> zygote  {"pool": {"namespaces", "size", "tmp_mb"}}   keep that many ready sandboxes
    zygote -> server  {"id", "pid", "ready"}      the command started (its own session and group;
                                                  "ready": in a ready sandbox, `_ready.py`)
    zygote -> server  {"pid", "exit_code"}        it ended (negative: killed by that signal)
    zygote -> server  {"pool": {"ready", "size"}} ready sandboxes waiting now (size 0: given up)
A command whose set-up fails exits 126 with the reason on its stderr (a Landlock rule that
cannot be applied included: only a missing optional system path is skipped); one that cannot
be executed exits 127. A probe (`"probe": true`) is confined the same way, then exits 0 instead
of executing anything. When the server's end of the socket closes (a clean close, or the server
was killed), the zygote kills the commands still running and exits.

Confinement (`_confine.py`), in the command's process, in this order:
0. as root (identity "setuid"), the process is cloned straight into its namespaces (`"pid"`
   with IPC, "net", "mount"): it is PID 1 itself and steps 2 and 3 are done; under a user
   namespace it is forked, and:
1. its own session and process group; stdin /dev/null; `chdir` to its workspace, still as the
   server's user (so the workspace's parents need not be searchable by the command's identity);
2. `unshare` of the requested namespaces: "pid" (with IPC), "net", "mount", and a user
   namespace when the identity is "userns" (uid/gid maps written right after);
3. with "pid": fork once more. The new child is PID 1 of the new PID namespace and becomes the
   command; this process stays outside as its supervisor, waits, and ends the way it ended.
   When the command (the namespace's init) ends, the kernel kills everything left inside;
4. with "mount": a root of its own (`_mountns.enter_root`: read-only system directories, its
   workspace `"mount": {"workspace"}`, a private /tmp of `"tmp_mb"`, a fresh /proc with "pid");
5. resource limits; the Landlock ruleset is built in the new root (its paths opened while still
   privileged), scoped (abstract UNIX sockets, signals) when the policy says `"scoped"`;
6. identity "setuid" (the server is root): no groups, the workspace's own gid and uid;
7. no new privileges, then Landlock applied; exec.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # its stdlib-only helpers beside it (run with -I)
import _confine  # type: ignore[import-not-found]  # a sibling script, on sys.path by its directory
import _ready  # type: ignore[import-not-found]  # a sibling script, on sys.path by its directory


def _child(request: dict[str, Any], out_fd: int, err_fd: int, born: bool) -> None:
    """In the command's process: confine, then exec. Never returns."""
    try:
        _confine.confine(request, out_fd, err_fd, born=born)
    except BaseException as exc:
        os.write(2, f"sandbox set-up failed: {exc}\n".encode())
        os._exit(126)
    _confine.exec_command(request)


_QUIET_S = 0.05
_children: set[int] = set()
_pool: _ready.Pool | None = None


def _start(sock: socket.socket, own_fds: list[int]) -> bool:
    try:
        data, fds = _confine.receive(sock, 2)
    except ConnectionError:  # the server is gone
        return False
    if not data:
        return False
    request = json.loads(data)
    if "pool" in request:
        _configure_pool(request["pool"], sock, own_fds)
        return True
    pid, ready = _from_pool(request, data, fds), True
    if pid is None:
        (pid, born), ready = _confine.start(request), False
        if pid == 0:
            for fd in [sock.fileno(), *(_pool.fds() if _pool else [])]:
                os.close(fd)
            _child(request, fds[0], fds[1], born)
    _children.add(pid)
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps({"id": request["id"], "pid": pid, "ready": ready}).encode())
    if ready:
        _pool_said(sock)
    return True


def _from_pool(request: dict[str, Any], data: bytes, fds: array.array[int]) -> int | None:
    """The pid of the ready sandbox that took the request; None: start it fresh (also when its
    workspace cannot be copied: the fresh start then fails with the reason, and no ready
    sandbox is spent on it)."""
    if _pool is None or not _pool.fits(request) or not _pool.ready:
        return None
    try:
        sent = _ready.with_workspace(request, fds)
    except OSError:
        return None
    try:
        while (member := _pool.take()) is not None:
            pid, member_sock = member
            try:
                _ready.hand_out(member_sock, data, sent)
                return int(pid)
            except OSError:  # it died since it said it was ready: `_reap` forgets it
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        return None
    finally:
        for fd in sent[len(fds) :]:
            os.close(fd)


def _configure_pool(config: dict[str, Any], sock: socket.socket, own_fds: list[int]) -> None:
    global _pool
    if _pool is not None:
        _pool.close()
    _pool = _ready.Pool(config["namespaces"], int(config["size"]), int(config["tmp_mb"]), _selector)
    own_fds.clear()
    own_fds.extend([sock.fileno(), *_wake])
    _pool_said(sock)


def _pool_said(sock: socket.socket) -> None:
    if _pool is not None:
        sock.send(json.dumps({"pool": {"ready": _pool.ready, "size": _pool.size}}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in _children and _pool is not None and _pool.reaped(pid):
            _pool_said(sock)
            continue
        _children.discard(pid)
        with contextlib.suppress(OSError):  # what the command left in its group dies with it
            os.killpg(pid, signal.SIGKILL)  # (the group id is still reserved while members live)
        sock.send(json.dumps({"pid": pid, "exit_code": os.waitstatus_to_exitcode(status)}).encode())


_selector = selectors.DefaultSelector()
_wake: tuple[int, int] = (-1, -1)


def main() -> None:
    global _wake
    sock = socket.socket(fileno=int(sys.argv[1]))
    _wake = os.pipe()
    os.set_blocking(_wake[1], False)
    signal.set_wakeup_fd(_wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd does the work
    _selector.register(sock, selectors.EVENT_READ, "request")
    _selector.register(_wake[0], selectors.EVENT_READ, "child")
    own_fds: list[int] = []
    last_request = 0.0
    while True:
        # Ready sandboxes are made one at a time, once no request came for `_QUIET_S`: making
        # one takes locks (the kernel's mount and namespace locks) that starting commands need.
        quiet_in = _QUIET_S - (time.monotonic() - last_request) if _pool is not None and _pool.wanted() else None
        if quiet_in is not None and quiet_in <= 0 and _pool is not None:
            _pool.fill([*own_fds, _selector.fileno()])
            continue
        for key, _ in _selector.select(quiet_in):
            if key.data == "child":
                os.read(_wake[0], 4096)
                _reap(sock)
            elif key.data == "request":
                last_request = time.monotonic()
                if not _start(sock, own_fds):
                    _kill_all()
                    return
            elif _pool is not None and _pool.on_readable(key.data[1]):
                _pool_said(sock)


def _kill_all() -> None:
    """The server is gone (closed, or killed: its end of the socket closed either way): so are its commands."""
    if _pool is not None:
        _pool.close()
    for pid in _children:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
