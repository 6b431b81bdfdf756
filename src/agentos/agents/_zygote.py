"""The sandbox's fork server: a small stdlib-only process that starts confined commands.

Run as a script (`python -I -S _zygote.py FD`), never imported by the server. Why a separate
process: confining a command needs code between fork and exec, which makes Python give up
`vfork` and copy the whole server's page tables on every fork, on the event loop's thread.
Forking from this ~10 MB process instead costs a fraction of a millisecond, off the loop.

Protocol, on the SOCK_SEQPACKET socket FD (one datagram per message, JSON):
    server -> zygote  {"id", "argv", "cwd", "env", "rlimits", "namespaces", "identity", "landlock",
                       "mount"?, "probe"?} + SCM_RIGHTS [stdout, stderr]
    zygote -> server  {"id", "pid"}               the command started (its own session and group)
    zygote -> server  {"pid", "exit_code"}        it ended (negative: killed by that signal)
A command whose set-up fails exits 126 with the reason on its stderr (a Landlock rule that
cannot be applied included: only a missing optional system path is skipped); one that cannot
be executed exits 127. A probe (`"probe": true`) is confined the same way, then exits 0 instead
of executing anything. When the server's end of the socket closes (a clean close, or the server
was killed), the zygote kills the commands still running and exits.

Confinement, in the forked child, in this order:
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

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # its stdlib-only helper beside it (run with -I)
import _mountns  # type: ignore[import-not-found]

_CLONE_NEWUSER = 0x10000000
_NAMESPACES = {"pid": 0x20000000 | 0x08000000, "net": 0x40000000, "mount": 0x00020000}  # pid: with CLONE_NEWIPC
_LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_RULE_PATH_BENEATH = 1
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_libc = ctypes.CDLL(None, use_errno=True)


def _unshare(namespaces: list[str], identity: dict[str, Any] | None) -> None:
    userns = identity is not None and identity["how"] == "userns"
    flags = sum(_NAMESPACES[name] for name in namespaces) | (_CLONE_NEWUSER if userns else 0)
    if not flags:
        return
    uid, gid = os.getuid(), os.getgid()  # read before: inside, unmapped ids read as 65534
    if _libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), f"unshare({'+'.join(namespaces + ['user'] * userns)})")
    if userns:  # the server's ids appear inside as the workspace's: never as root
        assert identity is not None
        for path, data in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{identity['uid']} {uid} 1"),
                           ("/proc/self/gid_map", f"{identity['gid']} {gid} 1")):  # fmt: skip
            with open(path, "w") as f:
                f.write(data)


def _fork_init() -> None:
    """Returns in the new PID namespace's first process; this one supervises it from outside."""
    pid = os.fork()
    if pid == 0:
        _die_with_parent()
        return
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # end by the same signal, so the server sees what the command saw
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def _die_with_parent() -> None:
    # Reset by every change of identity: set again after the drop.
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PDEATHSIG)")


def _drop_identity(identity: dict[str, Any] | None) -> None:
    if identity is None or identity["how"] != "setuid":
        return
    uid, gid = identity["uid"], identity["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root to another uid: every capability goes too
    if os.getuid() != uid or os.geteuid() != uid or os.getgroups():
        raise RuntimeError(f"the identity {uid}:{gid} did not take")


def _no_new_privs() -> None:
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")


def _landlock_ruleset(policy: dict[str, Any] | None) -> int | None:
    """The ruleset fd; its paths are opened now, before the identity changes."""
    if policy is None:
        return None
    create, add_rule, _ = _LANDLOCK[platform.machine()]
    scoped = policy.get("scoped", 0)  # struct landlock_ruleset_attr: fs, then (ABI >= 4) net, (ABI >= 6) scoped
    packed = struct.pack("=QQQ", policy["handled"], 0, scoped) if scoped else struct.pack("=Q", policy["handled"])
    attr = ctypes.create_string_buffer(packed, len(packed))
    ruleset = _libc.syscall(create, attr, ctypes.c_size_t(len(packed)), ctypes.c_uint32(0))
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
    return int(ruleset)


def _landlock_restrict(ruleset: int | None) -> None:
    if ruleset is None:
        return
    restrict = _LANDLOCK[platform.machine()][2]
    if _libc.syscall(restrict, ruleset, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)


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
        _confine(request, out_fd, err_fd)
    except BaseException as exc:
        os.write(2, f"sandbox set-up failed: {exc}\n".encode())
        os._exit(126)
    if request.get("probe"):
        os._exit(0)
    try:
        os.execvpe(request["argv"][0], request["argv"], request["env"])
    except OSError as exc:
        os.write(2, f"cannot start {request['argv'][0]!r}: {exc.strerror}\n".encode())
        os._exit(127)


def _confine(request: dict[str, Any], out_fd: int, err_fd: int) -> None:
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.chdir(request["cwd"])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    identity, pid_namespace = request["identity"], "pid" in request["namespaces"]
    _unshare(request["namespaces"], identity)
    if pid_namespace:
        _fork_init()
    if "mount" in request["namespaces"]:  # in the PID namespace: its /proc is that namespace's
        mount = request.get("mount") or {}
        _mountns.enter_root(mount.get("workspace"), mount.get("tmp_mb", 1), pid_namespace)
    for which, value in request["rlimits"]:
        resource.setrlimit(which, (value, value))
    ruleset = _landlock_ruleset(request["landlock"])
    _drop_identity(identity)
    if pid_namespace:
        _die_with_parent()
    _no_new_privs()
    _landlock_restrict(ruleset)
    if request.get("tmpdir"):  # made by the command's identity: the server never follows its paths
        with contextlib.suppress(FileExistsError):
            os.mkdir(request["tmpdir"], 0o700)


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
