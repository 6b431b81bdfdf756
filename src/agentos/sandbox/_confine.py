"""The steps that confine a sandboxed command's process, between fork and exec (stdlib only).

Loaded by the fork server (`_zygote.py`, run as a script) and its ready sandboxes (`_ready.py`)
from their own directory; what each step gives, and their order, is `_zygote.py`'s docstring.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import os
import platform
import resource
import signal
import socket
import struct
from typing import Any

import _mountns  # type: ignore[import-not-found]  # a sibling script, on sys.path by its directory

_CLONE_NEWUSER = 0x10000000
_NAMESPACES = {"pid": 0x20000000 | 0x08000000, "net": 0x40000000, "mount": 0x00020000}  # pid: with CLONE_NEWIPC
_LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_RULE_PATH_BENEATH = 1
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_libc = ctypes.CDLL(None, use_errno=True)
_raw_libc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across the call: for `clone`
_python = ctypes.pythonapi
_CLONE = {"x86_64": 56, "aarch64": 220}


def unshare(namespaces: list[str], identity: dict[str, Any] | None) -> None:
    userns = identity is not None and identity["how"] == "userns"
    flags = sum(_NAMESPACES[name] for name in namespaces) | (_CLONE_NEWUSER if userns else 0)
    if not flags:
        return
    uid, gid = os.getuid(), os.getgid()  # read before: inside, unmapped ids read as 65534
    if _libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), f"unshare({'+'.join(namespaces + ['user'] * userns)})")
    if userns:  # the server's ids appear inside as the workspace's: never as root
        assert identity is not None
        for path, data in (
            ("/proc/self/setgroups", "deny"),
            ("/proc/self/uid_map", f"{identity['uid']} {uid} 1"),
            ("/proc/self/gid_map", f"{identity['gid']} {gid} 1"),
        ):
            with open(path, "w") as f:
                f.write(data)


def fork_init() -> None:
    """Returns in the new PID namespace's first process; this one supervises it from outside."""
    pid = os.fork()
    if pid == 0:
        die_with_parent()
        return
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # end by the same signal, so the server sees what the command saw
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def clone_into(namespaces: list[str]) -> int:
    """`fork`, with the child born in new `namespaces` (no user namespace): with "pid" it is that
    namespace's PID 1 itself, so no second process has to wait outside for it (`fork_init`).
    Returns 0 in the child. `os.fork` cannot take flags: the raw `clone` is called with the GIL
    held, between the interpreter's own before- and after-fork steps, as `os.fork` does.

    Raises:
        OSError: the kernel refused.
    """
    flags = sum(_NAMESPACES[name] for name in namespaces) | signal.SIGCHLD
    _python.PyOS_BeforeFork()
    pid = _raw_libc.syscall(_CLONE[platform.machine()], ctypes.c_ulong(flags), None, None, None, None)
    if pid == 0:
        _python.PyOS_AfterFork_Child()
        return 0
    _python.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), f"clone({'+'.join(namespaces)})")
    return int(pid)


def die_with_parent() -> None:
    # Reset by every change of identity: set again after the drop.
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PDEATHSIG)")


def drop_identity(identity: dict[str, Any] | None) -> None:
    if identity is None or identity["how"] != "setuid":
        return
    uid, gid = identity["uid"], identity["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root to another uid: every capability goes too
    if os.getuid() != uid or os.geteuid() != uid or os.getgroups():
        raise RuntimeError(f"the identity {uid}:{gid} did not take")


def no_new_privs() -> None:
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")


def landlock_ruleset(policy: dict[str, Any] | None) -> int | None:
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


def landlock_restrict(ruleset: int | None) -> None:
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


def start(request: dict[str, Any]) -> tuple[int, bool]:
    """The command's process: `(pid, born)`, pid 0 in the child. Born (`clone_into`) in its
    namespaces, PID 1 itself, unless it needs a user namespace: that one's uid map is written
    by the child before anything else, after `fork`, `unshare` and `fork_init` (`confine`)."""
    identity = request["identity"]
    if request["namespaces"] and not (identity and identity["how"] == "userns"):
        with contextlib.suppress(OSError):  # the kernel refused a namespace now (a limit reached):
            return clone_into(request["namespaces"]), True  # the child's own unshare says which (126)
    return os.fork(), False


def confine(request: dict[str, Any], out_fd: int, err_fd: int, *, born: bool) -> None:
    """Every step, in order, in the child `start` made; `exec` follows."""
    if born:
        die_with_parent()  # the fork server; set again after the identity changes
    os.setsid()
    stdio(out_fd, err_fd)
    os.chdir(request["cwd"])
    identity, pid_namespace = request["identity"], "pid" in request["namespaces"]
    if not born:
        unshare(request["namespaces"], identity)
        if pid_namespace:
            fork_init()
    if "mount" in request["namespaces"]:  # in the PID namespace: its /proc is that namespace's
        mount = request.get("mount") or {}
        _mountns.enter_root(mount.get("workspace"), mount.get("tmp_mb", 1), pid_namespace)
    lock_down(request, dies_with_parent=born or pid_namespace)


def stdio(out_fd: int, err_fd: int, null: int | None = None) -> None:
    """stdin `/dev/null` (`null`: opened before, where the root no longer has it), stdout, stderr."""
    if null is None:
        null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def lock_down(request: dict[str, Any], *, dies_with_parent: bool) -> None:
    """The steps after the namespaces and the root: limits, Landlock, identity, no new privileges.
    `dies_with_parent`: the process was made to die with its parent (reset by the identity change)."""
    identity = request["identity"]
    for which, value in request["rlimits"]:
        resource.setrlimit(which, (value, value))
    ruleset = landlock_ruleset(request["landlock"])
    drop_identity(identity)
    if dies_with_parent:
        die_with_parent()
    no_new_privs()
    landlock_restrict(ruleset)
    if request.get("tmpdir"):  # made by the command's identity: the server never follows its paths
        with contextlib.suppress(FileExistsError):
            os.mkdir(request["tmpdir"], 0o700)


def receive(sock: socket.socket, max_fds: int) -> tuple[bytes, array.array[int]]:
    """One datagram and the fds that came with it (SCM_RIGHTS): the fork server's requests, and a
    ready sandbox's. An empty datagram: the other end closed.

    Raises:
        ConnectionError: the other end is gone.
    """
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(1 << 20, socket.CMSG_SPACE(max_fds * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, fds


def exec_command(request: dict[str, Any]) -> None:
    """After every step: a probe exits 0; a command is executed (127 when it cannot be). Never returns."""
    if request.get("probe"):
        os._exit(0)
    try:
        os.execvpe(request["argv"][0], request["argv"], request["env"])
    except OSError as exc:
        os.write(2, f"cannot start {request['argv'][0]!r}: {exc.strerror}\n".encode())
        os._exit(127)
