"""`run_command`: run an argv in a confined child process without blocking the event loop.

Commands are started by a small fork server (`forkserver.py`, `_zygote.py`), which confines
each child between fork and exec (what each layer gives: docs/security.md):
- its own PID (and IPC) namespace: the command is PID 1 there and sees or signals nothing
  outside its own tree; when it ends, the kernel kills what it left behind;
- an identity of its workspace's own: as root, a dedicated uid and gid per workspace
  (`isolation.Identities`); otherwise a user namespace mapping the server's uid to that uid;
- its workspace, mode 0700 and owned by that identity; its own process group, killed with
  SIGKILL at the timeout;
- `resource` limits: CPU seconds, address space, file size, process count, no core files;
- no network: a fresh network namespace;
- a mount namespace with a root of its own (`_mountns.py`): read-only system directories, its
  workspace, a private `/tmp`, a fresh `/proc`, a few devices; nothing else of the host's files
  (no path-based UNIX socket of the host can be named);
- Landlock: writes only below its working directory and its private `/tmp`, reads only system
  directories and its own directory, no `/proc` (a rule for the working directory that cannot
  be applied fails the command with exit code 126); with Landlock ABI >= 6 (Linux >= 6.12)
  scoped too: no abstract UNIX socket or signal reaches outside its sandbox;
- no new privileges; a minimal environment built from scratch: nothing of the server's leaks.
What the OS allows is probed once (`start()`). The sandbox fails closed: if a part is missing,
every command is refused with a clear error unless `sandbox.allow_weaker` is set, and the
mode is logged at start-up and shown by `/readyz` (`status()`).
Output beyond `output_max_bytes` per stream is drained and dropped, and marked truncated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.config import SandboxConfig
from agentos.config.agents import CommandLimits
from agentos.sandbox import _landlock
from agentos.sandbox.command import CommandResult
from agentos.sandbox.forkserver import ForkServer
from agentos.sandbox.isolation import (
    Identities,
    IdentityKind,
    SandboxStatus,
    chown_tree,
    private_workspace,
    probe,
    unsearchable_parent,
)
from agentos.sandbox.pipes import Output, drain

log = logging.getLogger(__name__)

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class SandboxStatistics:
    mode: str  # "unprobed" before the first command or `start()`
    missing: tuple[str, ...]
    landlock_abi: int
    commands_started: int
    commands_running: int
    ready: int = 0  # sandboxes confined ahead of time, waiting for a command
    from_ready: int = 0  # commands started in one of them


class Sandbox:
    """Runs commands confined; probes what the OS allows once, at `start()` or first use.

    Usage::

        sandbox = Sandbox(SandboxConfig())
        status = await sandbox.start()             # logs the mode; status.to_dict() for /readyz
        result = await sandbox.run(["ls", "-l"], Path("work/run_1"), CommandLimits())
        await sandbox.close()
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self._config = config or SandboxConfig()
        self._forks = ForkServer()
        self._status: SandboxStatus | None = None
        self._landlock_abi = _landlock.abi_version()
        self._identities = Identities(self._config.uid_base, self._config.uid_count)
        self._warned_parents: set[Path] = set()
        # The workspaces' files are looked at by one thread of their own: one claim at a time (two
        # drawing a free uid at once could draw the same), never queued behind the default
        # executor's work (a large PDF being extracted), never on the loop.
        self._claims = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentos-workspaces")
        self._probe_lock = asyncio.Lock()

    def status(self) -> SandboxStatus | None:
        """What `start()` found; None before."""
        return self._status

    def statistics(self) -> SandboxStatistics:
        forks, status = self._forks.statistics(), self._status
        return SandboxStatistics(
            mode=status.mode if status else "unprobed",
            missing=status.missing if status else (),
            landlock_abi=self._landlock_abi,
            commands_started=forks.spawned,
            commands_running=forks.running,
            ready=forks.ready,
            from_ready=forks.from_ready,
        )

    async def start(self) -> SandboxStatus:
        """Probe what the OS gives (once) and log the mode."""
        if self._status is not None:
            return self._status
        async with self._probe_lock:
            if self._status is None:
                status = await probe(
                    self._try_parts,
                    root=os.geteuid() == 0,
                    landlock_abi=self._landlock_abi,
                    allow_weaker=self._config.allow_weaker,
                    scoping=_landlock.scopes(self._landlock_abi),
                )
                level = logging.INFO if status.mode == "strict" else logging.WARNING
                log.log(level, "%s", status.summary())
                await self._keep_ready(status)
                self._status = status
        return self._status

    async def wait_ready(self, count: int) -> None:
        """Until `count` sandboxes are ready (after `start()`; callers bound it with a timeout)."""
        await self._forks.wait_ready(count)

    async def _keep_ready(self, status: SandboxStatus) -> None:
        size = self._config.ready_sandboxes
        if not size:
            return
        if status.mode == "refused" or status.identity != "setuid" or not status.namespaces:
            log.info(
                "sandbox: no ready sandboxes (sandbox.ready_sandboxes = %d): they need the server to run "
                "as root and at least one namespace; every command starts fresh",
                size,
            )
            return
        await self._forks.keep_ready(list(status.namespaces), size, CommandLimits().file_size_mb)
        log.info("sandbox: %d ready sandboxes kept for bursts of commands", size)

    async def close(self) -> None:
        await self._forks.close()
        self._claims.shutdown(wait=False)

    async def run(
        self, argv: Sequence[str], workdir: Path, limits: CommandLimits, *, operation_id: str = ""
    ) -> CommandResult:
        """Run `argv` in `workdir` (created if missing) under `limits`.

        `operation_id` is given to the command as `AGENTOS_OPERATION_ID`: stable across replays,
        so a command can make its effect idempotent. A program that cannot be started yields
        exit code 127 and the reason on stderr; a failed confinement, 126 (a Landlock rule that
        cannot be applied included: the command never runs under a weaker or different policy).
        A sandbox missing a part (and not allowed to be weaker) runs nothing: the result's
        `refused` says why. A relative `workdir` is taken from the server's current directory,
        once, here: the command's process opens its Landlock rule after `chdir`.

        Raises:
            OSError: the workspace cannot be prepared, or the fork server failed.
        """
        status = await self.start()
        if status.mode == "refused":
            return CommandResult.refusal(status.refusal())
        private_root = "mount" in status.namespaces
        workdir, uid = await self._prepare(workdir, status.identity, private_root)
        env = {"PATH": _SAFE_PATH, "HOME": str(workdir), "TMPDIR": str(workdir / ".tmp"), "LANG": "C.UTF-8"}
        if operation_id:
            env["AGENTOS_OPERATION_ID"] = operation_id
        request = {
            "argv": list(argv),
            "cwd": str(workdir),
            "env": env,
            "rlimits": _rlimits(limits),
            "namespaces": list(status.namespaces),
            "identity": _identity(status.identity, uid),
            "landlock": self._policy(str(workdir), private_root) if status.landlock else None,
            "mount": {"workspace": str(workdir), "tmp_mb": limits.file_size_mb} if private_root else None,
            "tmpdir": ".tmp",
        }
        return await self._execute(request, limits)

    def _policy(self, workdir: str, private_tmp: bool) -> dict[str, Any]:
        return _landlock.policy(workdir, self._landlock_abi, private_tmp=private_tmp)

    async def _prepare(self, workdir: Path, identity: IdentityKind | None, private_root: bool) -> tuple[Path, int]:
        """The workspace (absolute) and its uid; the workspace made, private, and owned by it.
        Its files are looked at in threads, never on the loop (a first look lists the parent)."""
        setuid = identity == "setuid"
        loop = asyncio.get_running_loop()
        workdir, uid, made = await loop.run_in_executor(self._claims, self._claim, workdir, setuid)
        if made:
            await asyncio.to_thread(chown_tree, workdir, uid)
        # In a root of its own, the workspace's parents are the mount namespace's, searchable.
        if setuid and not private_root and workdir.parent not in self._warned_parents:
            self._warned_parents.add(workdir.parent)
            await loop.run_in_executor(self._claims, self._warn_if_unsearchable, workdir)
        return workdir, uid

    def _claim(self, workdir: Path, setuid: bool) -> tuple[Path, int, bool]:
        """(In the workspaces' thread.) The workspace taken from the server's current directory, its uid, and
        whether it was just made private (its tree then to be given to that uid)."""
        workdir = Path(os.path.abspath(workdir))
        uid = self._identities.of(workdir)
        return workdir, uid, private_workspace(workdir, uid if setuid else None)

    @staticmethod
    def _warn_if_unsearchable(workdir: Path) -> None:
        if (blocked := unsearchable_parent(workdir)) is not None:
            log.warning(
                "sandbox: %s is not searchable by other users: commands in %s reach their workspace "
                "by relative paths only (chmod o+x it to allow $HOME and absolute paths)",
                blocked,
                workdir.parent,
            )

    async def _try_parts(self, namespaces: list[str], identity: IdentityKind | None, landlock: bool) -> str:
        """Confine a throwaway child with these parts (it exits instead of executing): "" when
        that worked, else why not."""
        request = {
            "argv": ["true"],
            "cwd": "/",
            "env": {"PATH": _SAFE_PATH},
            "rlimits": [],
            "probe": True,
            "namespaces": namespaces,
            "identity": _identity(identity, self._identities.probe_uid),
            "landlock": self._policy("/", "mount" in namespaces) if landlock else None,
            "mount": {"workspace": None, "tmp_mb": 1},
        }
        result = await self._execute(request, CommandLimits(timeout_s=10))
        return "" if result.exit_code == 0 else (result.stderr.strip() or f"exit code {result.exit_code}")

    async def _execute(self, request: dict[str, Any], limits: CommandLimits) -> CommandResult:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = await self._forks.spawn(request, out_w, err_w)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        async with Output(out_r, limits.output_max_bytes) as out, Output(err_r, limits.output_max_bytes) as err:
            exit_code, timed_out = await self._wait(pid, limits.timeout_s)
            await drain(out, err)
        return CommandResult(exit_code, out.text(), err.text(), out.truncated, err.truncated, timed_out)

    async def _wait(self, pid: int, timeout_s: float) -> tuple[int | None, bool]:
        """The exit code; at the timeout (or on cancellation) the whole group is killed.

        After a normal exit the fork server kills what is left of the group itself, right
        when it reaps the leader, before the group's id can be reused.
        """
        try:
            return await asyncio.wait_for(self._forks.wait(pid), timeout=timeout_s), False
        except TimeoutError:
            _kill_group(pid)
            return None, True
        except BaseException:
            _kill_group(pid)
            raise


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _identity(kind: IdentityKind | None, uid: int) -> dict[str, Any] | None:
    return {"how": kind, "uid": uid, "gid": uid} if kind else None


def _rlimits(limits: CommandLimits) -> list[tuple[int, int]]:
    mb = 1024 * 1024
    return [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_mb * mb),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb),
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_CORE, 0),
    ]
