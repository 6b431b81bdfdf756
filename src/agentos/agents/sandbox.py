"""`run_command`: run an argv in a confined child process without blocking the event loop.

Commands are started by a small fork server (`forkserver.py`, `_zygote.py`), which confines
each child between fork and exec:
- its own session and process group (a timeout kills the whole group with SIGKILL);
- `resource` limits: CPU seconds, address space, file size, process count, no core files;
- no network: a fresh network namespace (`unshare(CLONE_NEWNET)`, inside a user namespace
  when not root), probed once per process; where the OS refuses, commands keep the host's
  network and `statistics()` / the log say so;
- Landlock: writes only below its working directory, reads only system directories and its
  own directory, no `/proc` (where Landlock is missing, this is logged and skipped; where a
  rule for the working directory cannot be applied, the command fails with exit code 126);
- a minimal environment built from scratch: nothing of the server's environment leaks.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentos.agents import _landlock
from agentos.agents.forkserver import ForkServer
from agentos.agents.spec import CommandLimits
from agentos.errors import InvalidInput

log = logging.getLogger(__name__)

NetMode = Literal["netns", "userns", "none"]
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_READ_CHUNK = 65_536
_DRAIN_AFTER_EXIT_S = 2.0  # output still open this long after the kill came from an escaped process


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int | None  # None when killed at the timeout
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "timed_out": self.timed_out,
        }


@dataclass(frozen=True, slots=True)
class SandboxStatistics:
    net_mode: NetMode
    landlock_abi: int
    commands_started: int
    commands_running: int


def check_argv(command: object) -> list[str]:
    """The argv of a `run_command` call.

    Raises:
        InvalidInput: a string (shell command line) or anything but a non-empty list of strings.
    """
    if isinstance(command, str):
        raise InvalidInput('command must be an argv array like ["ls", "-l"], not a string')
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise InvalidInput("command must be a non-empty array of strings")
    if any("\x00" in a for a in command):
        raise InvalidInput("command arguments must not contain NUL bytes")
    return list(command)


class Sandbox:
    """Runs commands confined; probes what the OS allows once, on first use.

    Usage::

        sandbox = Sandbox()
        result = await sandbox.run(["ls", "-l"], Path("work/run_1"), CommandLimits())
        await sandbox.close()
    """

    def __init__(self) -> None:
        self._forks = ForkServer()
        self._net_mode: NetMode | None = None
        self._landlock_abi = _landlock.abi_version()
        if not self._landlock_abi:
            log.warning("sandbox: no Landlock on this kernel; commands may write outside their directory")
        self._probe_lock = asyncio.Lock()

    def statistics(self) -> SandboxStatistics:
        forks = self._forks.statistics()
        return SandboxStatistics(
            net_mode=self._net_mode or "none",
            landlock_abi=self._landlock_abi,
            commands_started=forks.spawned,
            commands_running=forks.running,
        )

    async def close(self) -> None:
        await self._forks.close()

    async def run(
        self, argv: Sequence[str], workdir: Path, limits: CommandLimits, *, operation_id: str = ""
    ) -> CommandResult:
        """Run `argv` in `workdir` (created if missing) under `limits`.

        `operation_id` is given to the command as `AGENTOS_OPERATION_ID`: stable across replays,
        so a command can make its effect idempotent. A program that cannot be started yields
        exit code 127 and the reason on stderr; a failed confinement, 126 (a Landlock rule that
        cannot be applied included: the command never runs under a weaker or different policy).
        A relative `workdir` is taken from the server's current directory, once, here: the
        command's process opens its Landlock rule after `chdir`.
        """
        workdir, env = _prepare_workdir(workdir)
        if operation_id:
            env["AGENTOS_OPERATION_ID"] = operation_id
        request = {
            "argv": list(argv),
            "cwd": str(workdir),
            "env": env,
            "rlimits": _rlimits(limits),
            "net": await self._probe(),
            "landlock": _landlock.policy(str(workdir), self._landlock_abi) if self._landlock_abi else None,
        }
        return await self._execute(request, limits)

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
        async with _Output(out_r, limits.output_max_bytes) as out, _Output(err_r, limits.output_max_bytes) as err:
            exit_code, timed_out = await self._wait(pid, limits.timeout_s)
            await _drain(out, err)
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

    async def _probe(self) -> NetMode:
        if self._net_mode is not None:
            return self._net_mode
        async with self._probe_lock:
            if self._net_mode is None:
                self._net_mode = await self._probe_net_mode()
        return self._net_mode

    async def _probe_net_mode(self) -> NetMode:
        """The first isolation mode a throwaway `true` starts under."""
        modes: list[NetMode] = ["netns", "userns"] if os.getuid() == 0 else ["userns"]
        for mode in modes:
            request = {"argv": ["true"], "cwd": "/", "env": {"PATH": _SAFE_PATH}, "rlimits": [], "net": mode,
                       "landlock": None}  # fmt: skip
            result = await self._execute(request, CommandLimits(timeout_s=10))
            if result.exit_code == 0:
                log.info("sandbox: commands run without network (%s)", mode)
                return mode
            log.debug("sandbox: %s unavailable: %s", mode, result.stderr.strip())
        log.warning("sandbox: the OS refuses network namespaces; commands keep the host's network")
        return "none"


class _Output:
    """One output pipe of a command, read on the loop, keeping the first `max_bytes`."""

    def __init__(self, fd: int, max_bytes: int) -> None:
        self._fd = fd
        self._max_bytes = max_bytes
        self._kept = bytearray()
        self.truncated = False
        self.task: asyncio.Task[None] | None = None
        self._transport: asyncio.ReadTransport | None = None

    async def __aenter__(self) -> _Output:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_READ_CHUNK)
        pipe = os.fdopen(self._fd, "rb", buffering=0)
        self._transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        self.task = asyncio.ensure_future(self._read(reader))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.task is not None and self._transport is not None
        if not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self._transport.close()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """Keep the head, drain the rest so the child never blocks on a full pipe."""
        while chunk := await reader.read(_READ_CHUNK):
            room = self._max_bytes - len(self._kept)
            if len(chunk) > room:
                self.truncated = True
            self._kept += chunk[: max(room, 0)]

    def text(self) -> str:
        text = self._kept.decode("utf-8", errors="replace")
        return text + "\n[output truncated]" if self.truncated else text


async def _drain(*outputs: _Output) -> None:
    """Wait for the pipes' EOF; a process that left the group may hold them open: stop waiting."""
    tasks = [o.task for o in outputs if o.task is not None]
    _, pending = await asyncio.wait(tasks, timeout=_DRAIN_AFTER_EXIT_S)
    for output in outputs:
        if output.task in pending:
            output.truncated = True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _prepare_workdir(workdir: Path) -> tuple[Path, dict[str, str]]:
    """The run's directory made absolute and created (a getcwd and two mkdir calls:
    microseconds, fine on the loop), and the command's env."""
    workdir = Path(os.path.abspath(workdir))
    tmp = workdir / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return workdir, {"PATH": _SAFE_PATH, "HOME": str(workdir), "TMPDIR": str(tmp), "LANG": "C.UTF-8"}


def _rlimits(limits: CommandLimits) -> list[tuple[int, int]]:
    mb = 1024 * 1024
    return [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_mb * mb),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb),
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_CORE, 0),
    ]
