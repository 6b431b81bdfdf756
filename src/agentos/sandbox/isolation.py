"""What the sandbox can isolate on this OS, and the identity each workspace's commands run as.

Usage::

    status = await probe(try_parts, root=os.getuid() == 0, landlock_abi=abi, allow_weaker=False)
    status.mode            # "strict" | "weaker" (allowed by sandbox.allow_weaker) | "refused"
    identities = Identities(base=1_000_000_000, count=1 << 20)
    uid = identities.of(Path("/srv/agentos/data/workspaces/r_1"))
    if private_workspace(path, uid):      # mode 0700; owned by that uid (when root)
        await asyncio.to_thread(chown_tree, path, uid)

The parts (`PARTS`) a strict sandbox needs, each probed once by confining a throwaway child:
- "pid_namespace": the command is PID 1 of its own PID (and IPC) namespace, so it sees and
  signals nothing but its own tree (`kill -9 -1` included);
- "identity": root drops to a uid and gid of the workspace's own (`setresuid`), so DAC keeps
  runs apart and RLIMIT_NPROC binds; any other user maps itself to that uid in a user namespace
  (the kernel still counts it as the server's user: see docs/security.md);
- "network_namespace": no network, loopback and abstract UNIX sockets included;
- "mount_namespace": a root of its own (`_mountns.py`): system directories read-only, its
  workspace, a private /tmp; no path-based UNIX socket of the host can be named;
- "landlock": writes only below its workspace, reads only system directories and its workspace.
Landlock's scoping (ABI >= 6) is stated, not required: the PID and network namespaces keep
signals and abstract UNIX sockets in already; where the kernel has it, it is a second wall.
"""

from __future__ import annotations

import logging
import os
import stat
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Mode = Literal["strict", "weaker", "refused"]
IdentityKind = Literal["setuid", "userns"]
PARTS = ("pid_namespace", "identity", "network_namespace", "mount_namespace", "landlock")
_DESCRIPTIONS = {
    "pid_namespace": "a PID namespace",
    "identity": "an identity of its own",
    "network_namespace": "a network namespace",
    "mount_namespace": "a mount namespace",
    "landlock": "Landlock",
}
# try_parts(namespaces, identity, landlock) -> the reason it failed, "" when the child was confined
TryParts = Callable[[list[str], IdentityKind | None, bool], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """The sandbox this server gives its commands: what `/readyz` and the start-up log state."""

    mode: Mode
    missing: tuple[str, ...]  # of PARTS
    identity: IdentityKind | None  # None: commands run as the server's uid
    namespaces: tuple[str, ...]  # given to the fork server: "pid", "net", "mount"
    landlock: bool
    scoping: tuple[str, ...] = ()  # what Landlock scopes to the command: "abstract_unix_socket", "signal"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "missing": list(self.missing), "landlock_scoping": list(self.scoping)}

    def refusal(self) -> str:
        """What the model is told when `mode` is "refused"."""
        return (
            f"run_command is refused: this server cannot give commands {_described(self.missing)}, "
            "and its administrator has not allowed a weaker sandbox (sandbox.allow_weaker)"
        )

    def summary(self) -> str:
        scoping = f"; Landlock scoping: {', '.join(self.scoping) or 'none (Linux < 6.12)'}" if self.landlock else ""
        if self.mode == "strict":
            return f"sandbox: strict ({_described(PARTS)}; identity by {self.identity}{scoping})"
        if self.mode == "weaker":
            return (
                f"sandbox: WEAKER, allowed by sandbox.allow_weaker: commands run without "
                f"{_described(self.missing)}{scoping}"
            )
        return (
            f"sandbox: run_command is refused: this OS cannot give commands {_described(self.missing)}; "
            "set sandbox.allow_weaker = true to run them in a weaker sandbox"
        )


def _described(parts: tuple[str, ...]) -> str:
    return ", ".join(_DESCRIPTIONS[p] for p in parts)


async def probe(
    try_parts: TryParts, *, root: bool, landlock_abi: int, allow_weaker: bool, scoping: tuple[str, ...] = ()
) -> SandboxStatus:
    """Which parts this OS gives; each tried on its own only when all of them together fail.

    Root whose `setresuid` is refused (root of a container's user namespace, with other uids
    unmapped) falls back to a user namespace of its own, like any other user.
    """
    kinds: list[IdentityKind] = ["setuid", "userns"] if root else ["userns"]
    landlock = landlock_abi > 0
    everything = ("pid", "net", "mount")
    reason = await try_parts(list(everything), kinds[0], landlock)
    if not reason and landlock:
        return SandboxStatus("strict", (), kinds[0], everything, True, scoping)
    log.debug("sandbox: the strict set-up failed: %s", reason)
    kind = await _first_identity(try_parts, kinds)
    works = {"identity": kind is not None}
    works["pid_namespace"] = not await _failed(try_parts, ["pid"], kind, False, "pid_namespace")
    works["network_namespace"] = not await _failed(try_parts, ["net"], kind, False, "network_namespace")
    with_proc = ["pid", "mount"] if works["pid_namespace"] else ["mount"]  # tried as it will run: with its /proc
    works["mount_namespace"] = not await _failed(try_parts, with_proc, kind, False, "mount_namespace")
    works["landlock"] = landlock and not await _failed(try_parts, [], None, True, "landlock")
    missing = tuple(part for part in PARTS if not works[part])
    given = (("pid", "pid_namespace"), ("net", "network_namespace"), ("mount", "mount_namespace"))
    namespaces = tuple(ns for ns, part in given if works[part])
    mode: Mode = "strict" if not missing else "weaker" if allow_weaker else "refused"
    return SandboxStatus(mode, missing, kind, namespaces, works["landlock"], scoping if works["landlock"] else ())


async def _first_identity(try_parts: TryParts, kinds: list[IdentityKind]) -> IdentityKind | None:
    for kind in kinds:
        if not await _failed(try_parts, [], kind, False, "identity"):
            return kind
    return None


async def _failed(
    try_parts: TryParts, namespaces: list[str], kind: IdentityKind | None, landlock: bool, part: str
) -> bool:
    reason = await try_parts(namespaces, kind, landlock)
    if reason:
        log.info("sandbox: %s is unavailable: %s", _DESCRIPTIONS[part], reason)
    return bool(reason)


class Identities:
    """One uid (and the gid of the same number) per workspace, from `[base + 1, base + count)`.

    The workspace's owner is the record: a workspace already owned by a uid in the range keeps
    it across restarts; a new one gets a uid no sibling workspace owns (the siblings are listed
    once per parent directory). `base` itself is the start-up probe's.
    """

    def __init__(self, base: int, count: int) -> None:
        self._base, self._count = base, count
        self._by_dir: dict[Path, int] = {}
        self._owner_of: dict[int, Path] = {}
        self._listed: set[Path] = set()

    @property
    def probe_uid(self) -> int:
        return self._base

    def of(self, workdir: Path) -> int:
        """The uid of `workdir` (absolute).

        Raises:
            OSError: every uid of the range is taken.
        """
        uid = self._by_dir.get(workdir)
        if uid is None:
            self._list(workdir.parent)
            owner = _owner(workdir)
            uid = owner if self._owner_of.get(owner) == workdir else self._free(workdir)
            self._by_dir[workdir] = uid
            self._owner_of[uid] = workdir
        return uid

    def _list(self, parent: Path) -> None:
        if parent in self._listed:
            return
        self._listed.add(parent)
        try:
            entries = list(os.scandir(parent))
        except FileNotFoundError:
            return
        for entry in entries:
            owner = entry.stat(follow_symlinks=False).st_uid
            if self._base < owner < self._base + self._count and entry.is_dir(follow_symlinks=False):
                self._owner_of.setdefault(owner, Path(entry.path))

    def _free(self, workdir: Path) -> int:
        span = self._count - 1
        start = zlib.crc32(os.fsencode(workdir)) % span
        for step in range(span):
            uid = self._base + 1 + (start + step) % span
            if uid not in self._owner_of:
                return uid
        raise OSError(f"no free sandbox uid left in [{self._base + 1}, {self._base + self._count})")


def _owner(path: Path) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_uid
    except FileNotFoundError:
        return -1


def private_workspace(workdir: Path, uid: int | None) -> bool:
    """`workdir` created and mode 0700 (no other run's identity may read it); True when it must
    still be handed to `uid` with `chown_tree` (new, or made by an earlier version: once)."""
    workdir.mkdir(parents=True, exist_ok=True)
    info = os.stat(workdir, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"the workspace {workdir} is not a directory")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(workdir, 0o700)
    return uid is not None and (info.st_uid, info.st_gid) != (uid, uid)


def chown_tree(top: Path, uid: int) -> None:
    """Everything below `top`, and `top`, owned by `uid`; symbolic links are never followed."""
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
    os.chown(top, uid, uid, follow_symlinks=False)


def unsearchable_parent(workdir: Path) -> Path | None:
    """The first directory above `workdir` that other users cannot search, if any: a command
    running as the workspace's own uid reaches its workspace only through its working directory
    then (relative paths work; `$HOME`, `$TMPDIR` and absolute paths do not)."""
    for parent in workdir.parents:
        with_others = os.stat(parent).st_mode & stat.S_IXOTH
        if not with_others:
            return parent
    return None
