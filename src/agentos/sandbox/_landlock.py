"""Landlock (Linux >= 5.13): the file-access policy of a sandboxed command.

`policy(workdir, abi)` is built in the server and applied in the command's process by the
fork server (`_zygote.py`). Reads are allowed below the system directories needed to run
programs; writes only below `workdir` (and its private `/tmp`) and to a few device files. `/proc`
is not granted: a command cannot read the server's `/proc/<pid>/environ`. With ABI >= 6 the
command is also scoped: no abstract UNIX socket or signal of its reaches outside its sandbox.

Each rule says whether it is required. The workspace rule is: if it cannot be applied, the
command must not run (it would run under a different policy than the one built here). The
system paths are optional: a directory this OS does not have (`/lib64`, `/lib32`) is skipped.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}
_CREATE_RULESET_VERSION = 1

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_WRITE_TREE = sum(1 << i for i in range(4, 13))  # remove/make dir, file, sym, fifo, ...
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_READ_ONLY_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt")
_DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random")
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2  # ABI >= 6 (Linux >= 6.12)
SCOPES = {"abstract_unix_socket": _SCOPE_ABSTRACT_UNIX_SOCKET, "signal": _SCOPE_SIGNAL}


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    number = _CREATE_RULESET.get(platform.machine())
    if number is None:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(number, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def scopes(abi: int) -> tuple[str, ...]:
    """What Landlock scopes to the command's own domain on this kernel: with ABI >= 6, it can
    neither connect to an abstract UNIX socket nor signal a process made outside its sandbox."""
    return tuple(SCOPES) if abi >= 6 else ()


def policy(workdir: str, abi: int, *, private_tmp: bool = False) -> dict[str, Any]:
    """`{"handled": mask, "scoped": mask, "rules": [[path, access, required], ...]}` for the fork server.

    `private_tmp`: the command has a `/tmp` of its own (its mount namespace's tmpfs): writable
    like its workspace. Never set it for a command that sees the host's `/tmp`.

    Raises:
        ValueError: `workdir` is relative: the fork server opens it after `chdir`, where a
            relative path names another directory or none.
    """
    if not os.path.isabs(workdir):
        raise ValueError(f"the sandbox needs an absolute working directory, got {workdir!r}")
    handled = _EXECUTE | _WRITE_FILE | _READ_FILE | _READ_DIR | _WRITE_TREE
    handled |= (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    device_rights = (_WRITE_FILE | _READ_FILE | (_TRUNCATE if abi >= 3 else 0)) & handled
    rules: list[list[Any]] = [[path, _EXECUTE | _READ_FILE | _READ_DIR, False] for path in _READ_ONLY_DIRS]
    rules += [[path, device_rights, False] for path in _DEVICE_FILES]
    rules.append([workdir, handled, True])
    if private_tmp:
        rules.append(["/tmp", handled, True])
    scoped = sum(SCOPES[name] for name in scopes(abi))
    return {"handled": handled, "scoped": scoped, "rules": rules}
