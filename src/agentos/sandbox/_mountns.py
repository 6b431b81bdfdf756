"""A sandboxed command's own root: only the files it needs, in a mount namespace of its own.

Stdlib only: the fork server (`_zygote.py`, run as a script) loads it from its own directory.
`enter_root` runs in the command's process after `unshare(CLONE_NEWNS)` (and, with a PID
namespace, in that namespace's init), as root of its namespaces: before Landlock, before the
identity drop. The root it makes, itself a read-only tmpfs:

- `/usr`, `/bin`, `/sbin`, `/lib`, `/lib64`, `/lib32`, `/etc`, `/opt` of the host, bound
  read-only, nosuid, nodev (a symbolic link such as `/bin -> usr/bin` is copied as a link);
- `/dev`: null, zero, full, random, urandom and tty (nodes of the host's numbers as root, bound
  from the host otherwise); `fd`, `stdin`, `stdout`, `stderr` links;
- `/tmp`: a tmpfs of the command's own (mode 1777, size-limited), gone when it ends;
- `/proc`: a fresh proc of its PID namespace (only with one: it shows that namespace alone);
- the workspace, read-write (nosuid, nodev), at the same absolute path as on the host.

Nothing else: not the host's `/tmp`, `/run`, `/var`, `/home`, `/root`, nor the server's data
dir, and so no path-based UNIX socket of the host (a database's, Docker's) can be named. All
mounts are made private first: nothing propagates to or from the host. Built the way
bubblewrap builds its root: a scaffold tmpfs over `/tmp` becomes the root for a moment, with the
host's root below it at `/oldroot` (its `/tmp` uncovered again); the new root is filled from
there, then pivoted into, and the scaffold with the host's root under it is detached.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import struct

_RDONLY, _NOSUID, _NODEV, _NOEXEC, _BIND, _REC, _PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_ATTR_RDONLY, _ATTR_NOSUID, _ATTR_NODEV = 1, 2, 4
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_MOUNT_SETATTR = 442  # the same number on every architecture (Linux >= 5.12)
_OPEN_TREE, _MOVE_MOUNT = 428, 429  # the same on every architecture (Linux >= 5.2)
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC, _AT_EMPTY_PATH, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 0x1000, 4
_REMOUNT = 32
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEVICE_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
_libc = ctypes.CDLL(None, use_errno=True)


def enter_root(workspace: str | None, tmp_mb: int, proc: bool) -> None:
    """Make the new root and enter it; the working directory becomes `workspace` (or `/`).

    The current working directory must be the workspace (it is bound from there: the host's
    path to it may hold symbolic links that mean something else in the new root).

    Raises:
        OSError: a mount, or the pivot, failed (the command must not run then).
    """
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _scaffold(proc, tmp_mb)
        if workspace is not None:
            os.makedirs("/newroot" + workspace, 0o755, exist_ok=True)
            os.fchdir(here)
            _mount(".", "/newroot" + workspace, None, _BIND | _REC)
            _set_attributes("/newroot" + workspace, _ATTR_NOSUID | _ATTR_NODEV)
        _enter("/newroot")
        _set_attributes("/", _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV, recursive=False)
        os.chdir(workspace or "/")
    finally:
        os.close(here)


def ready_root(proc: bool, tmp_mb: int) -> None:
    """A ready sandbox's root (`_ready.py`), entered: everything but its workspace; `/` still
    writable, for the workspace's mount point."""
    _scaffold(proc, tmp_mb)
    _enter("/newroot")


def attach_workspace(tree: int, workspace: str, tmp_mb: int, ready_tmp_mb: int) -> None:
    """After `ready_root`: the workspace (`tree`, a detached copy from `clone_workspace`) at its
    host path, `/` read-only, the working directory the workspace."""
    if tmp_mb != ready_tmp_mb:
        _mount(None, "/tmp", None, _REMOUNT | _NOSUID | _NODEV, f"size={tmp_mb}m")
    os.makedirs(workspace, 0o755, exist_ok=True)
    flags = ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)
    if _libc.syscall(_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(workspace), flags):
        _fail("move_mount of the workspace")
    _set_attributes("/", _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV, recursive=False)
    os.chdir(workspace)


def clone_workspace(path: str) -> int:
    """In the host's mount namespace (the fork server): a detached copy of the mount of the
    directory `path`, nosuid and nodev, for `attach_workspace` (`open_tree`, Linux >= 5.2; a
    mount namespace cannot bind what only another namespace holds, but can attach a copy)."""
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_EMPTY_PATH | _AT_RECURSIVE  # as `mount --rbind`
        tree = _libc.syscall(_OPEN_TREE, fd, b"", ctypes.c_uint(flags))
        if tree < 0:
            _fail(f"open_tree {path}")
    finally:
        os.close(fd)
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", _ATTR_NOSUID | _ATTR_NODEV, 0, 0, 0), 32)
    recursive = ctypes.c_uint(_AT_EMPTY_PATH | _AT_RECURSIVE)
    if _libc.syscall(_MOUNT_SETATTR, tree, b"", recursive, attr, ctypes.c_size_t(32)):
        os.close(tree)
        _fail(f"mount_setattr {path}")
    return int(tree)


def _scaffold(proc: bool, tmp_mb: int) -> None:
    """The scaffold is the root now, the host's root at `/oldroot` below it, and `/newroot`
    holds every part of the new root but the workspace."""
    _mount(None, "/", None, _REC | _PRIVATE)
    _mount("tmpfs", "/tmp", "tmpfs", _NOSUID | _NODEV, "mode=0755,size=64k")  # the scaffold
    os.chdir("/tmp")
    os.mkdir("oldroot")
    os.mkdir("newroot")
    _mount("tmpfs", "newroot", "tmpfs", _NOSUID | _NODEV, "mode=0755,size=1m")
    _pivot_root(".", "oldroot")
    os.chdir("/")
    _system_dirs()
    _devices()
    _mount("tmpfs", "/newroot/tmp", "tmpfs", _NOSUID | _NODEV, f"mode=1777,size={tmp_mb}m,nr_inodes=65536", mkdir=True)
    if proc:
        _mount("proc", "/newroot/proc", "proc", _NOSUID | _NODEV | _NOEXEC, mkdir=True)


def _system_dirs() -> None:
    for path in _SYSTEM_DIRS:
        host, new = "/oldroot" + path, "/newroot" + path
        if os.path.islink(host):
            os.symlink(os.readlink(host), new)
        elif os.path.isdir(host):
            _mount(host, new, None, _BIND | _REC, mkdir=True)
            _set_attributes(new, _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV)


def _devices() -> None:
    _mount("tmpfs", "/newroot/dev", "tmpfs", _NOSUID | _NOEXEC, "mode=0755,size=64k", mkdir=True)
    for name in _DEVICES:
        if os.path.exists(f"/oldroot/dev/{name}"):
            _device(f"/oldroot/dev/{name}", f"/newroot/dev/{name}")
    for name, target in _DEVICE_LINKS.items():
        os.symlink(target, f"/newroot/dev/{name}")


def _device(host: str, new: str) -> None:
    """The same character device: made with `mknod` where allowed (root of the host's user
    namespace), else bound from the host. A node is no mount: it costs nothing to tear down,
    and takes none of the kernel's mount locks, which every sandbox starting at once shares."""
    info = os.stat(host)
    try:
        os.mknod(new, stat.S_IFCHR | 0o666, info.st_rdev)
        os.chmod(new, 0o666)  # mknod applies the umask
        return
    except PermissionError:  # in a user namespace: no device nodes of its own
        pass
    os.close(os.open(new, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
    _mount(host, new, None, _BIND)


def _enter(new_root: str) -> None:
    """`new_root` becomes `/`; the scaffold, and the host's root below it, are detached."""
    scaffold = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.chdir(new_root)
        _pivot_root(".", ".")  # the scaffold now lies over the new root, at the same place
        os.fchdir(scaffold)
        if _libc.umount2(b".", _MNT_DETACH) != 0:
            _fail("umount2 of the host's root")
    finally:
        os.close(scaffold)
    os.chdir("/")


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None, *, mkdir: bool = False
) -> None:
    if mkdir:
        os.mkdir(target, 0o755)
    args = [None if s is None else os.fsencode(s) for s in (source, target, fstype)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), None if data is None else data.encode()) != 0:
        _fail(f"mount {target.removeprefix('/newroot') or '/'}")


def _set_attributes(path: str, attributes: int, *, recursive: bool = True) -> None:
    """Mount attributes set on `path`'s mount (and every mount below it); the others are kept."""
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", attributes, 0, 0, 0), 32)  # struct mount_attr
    flags = _AT_RECURSIVE if recursive else 0
    if _libc.syscall(_MOUNT_SETATTR, _AT_FDCWD, os.fsencode(path), ctypes.c_uint(flags), attr, ctypes.c_size_t(32)):
        _fail(f"mount_setattr {path.removeprefix('/newroot') or '/'}")


def _pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None or _libc.syscall(number, new_root.encode(), put_old.encode()) != 0:
        _fail("pivot_root")


def _fail(what: str) -> None:
    number = ctypes.get_errno()
    raise OSError(number, f"{what}: {os.strerror(number)}")
