"""The sandbox's fork server: a small stdlib-only process that starts confined commands.

Run as a script (`python -I -S _zygote.py FD`), never imported by the server. Why a separate
process: confining a command needs code between fork and exec, which makes Python give up
`vfork` and copy the whole server's page tables on every fork, on the event loop's thread.
Forking from this ~10 MB process instead costs a fraction of a millisecond, off the loop.

Protocol, on the SOCK_SEQPACKET socket FD (one datagram per message, JSON):
    server -> zygote  {"id", "argv", "cwd", "env", "rlimits", "net", "landlock"} + SCM_RIGHTS [stdout, stderr]
    zygote -> server  {"id", "pid"}               the command started (its own session and group)
    zygote -> server  {"pid", "exit_code"}        it ended (negative: killed by that signal)
A command whose set-up fails exits 126 with the reason on its stderr (a Landlock rule that
cannot be applied included: only a missing optional system path is skipped); one that cannot
be executed exits 127. When the server's end of the socket closes (a clean close, or the server
was killed), the zygote kills the commands still running and exits.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import platform
import resource
import selectors
import signal
import socket
import struct
import sys
from typing import Any

_CLONE_NEWNET, _CLONE_NEWUSER = 0x40000000, 0x10000000
_LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)


def _isolate_network(mode: str) -> None:
    if mode == "none":
        return
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWNET | (_CLONE_NEWUSER if mode == "userns" else 0)) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    if mode == "userns":
        for path, data in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):  # fmt: skip
            with open(path, "w") as f:
                f.write(data)


def _landlock(policy: dict[str, Any] | None) -> None:
    if policy is None:
        return
    create, add_rule, restrict = _LANDLOCK[platform.machine()]
    attr = ctypes.create_string_buffer(struct.pack("=Q", policy["handled"]), 8)
    ruleset = _libc.syscall(create, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for path, access, required in policy["rules"]:
        fd = _open_rule_path(path, required)
        if fd is None:
            continue  # an optional system directory this OS does not have
        beneath = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
        if _libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, beneath, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        os.close(fd)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
    if _libc.syscall(restrict, ruleset, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")


def _open_rule_path(path: str, required: bool) -> int | None:
    """An `O_PATH` fd for a Landlock rule; None for a missing optional path.

    Anything else fails the set-up: a rule left out changes what the command may do (without
    its workspace rule, no write in the workspace succeeds), and that must not pass unseen.
    """
    if required and not os.path.isabs(path):  # opened after chdir, it would name another place
        raise RuntimeError(f"the Landlock rule for {path!r} cannot be applied (a relative path)")
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        if not required:
            return None
        reason = "it does not exist"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    raise RuntimeError(f"the Landlock rule for {path} cannot be applied ({reason})")


def _child(request: dict[str, Any], out_fd: int, err_fd: int) -> None:
    """In the forked child: confine, then exec. Never returns."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.chdir(request["cwd"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        for which, value in request["rlimits"]:
            resource.setrlimit(which, (value, value))
        _isolate_network(request["net"])
        _landlock(request["landlock"])
    except BaseException as exc:
        os.write(2, f"sandbox set-up failed: {exc}\n".encode())
        os._exit(126)
    try:
        os.execvpe(request["argv"][0], request["argv"], request["env"])
    except OSError as exc:
        os.write(2, f"cannot start {request['argv'][0]!r}: {exc.strerror}\n".encode())
        os._exit(127)


_children: set[int] = set()


def _start(sock: socket.socket) -> bool:
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(1 << 20, socket.CMSG_SPACE(2 * fds.itemsize))
    if not data:
        return False
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:
        sock.close()
        _child(request, fds[0], fds[1])
    _children.add(pid)
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())
    return True


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _children.discard(pid)
        with contextlib.suppress(OSError):  # what the command left in its group dies with it
            os.killpg(pid, signal.SIGKILL)  # (the group id is still reserved while members live)
        sock.send(json.dumps({"pid": pid, "exit_code": os.waitstatus_to_exitcode(status)}).encode())


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd does the work
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                os.read(wake_r, 4096)
                _reap(sock)
            elif not _start(sock):
                _kill_all()
                return


def _kill_all() -> None:
    """The server is gone (closed, or killed: its end of the socket closed either way): so are its commands."""
    for pid in _children:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
