"""Start and stop the processes a bench run needs: the Agent OS server (the mock: `agentos_bench.common.mock_process`).

Everything is started as a child of this process, bound to 127.0.0.1, and stopped by its own pid
(SIGTERM, then SIGKILL after a bounded wait). Readiness is polled with a deadline, never forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import os
import signal
import socket
import sys
from asyncio.subprocess import PIPE
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path

import aiohttp

from agentos_bench.common.pinning import pinned


class BenchSetupError(RuntimeError):
    """A process the bench needs did not start or did not become ready."""


@dataclass(kw_only=True)
class Child:
    name: str
    process: asyncio.subprocess.Process
    url: str  # mock: …/v1; server: the base URL
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, kw_only=True)
class ServerPlan:
    profile_path: Path
    provider_url: str
    data_dir: Path
    session_ttl_s: float | None = None
    ready_timeout_s: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)  # added to this process's environment
    log_name: str = "server"  # the log file is <log_dir>/<log_name>.log (one per node of a cluster)
    cpus: str = ""  # taskset's CPU list for the server (and its workers); empty: not pinned
    workers: int = 1  # `agentos serve --workers`: ready once every worker listens


_LISTENING = b"agentos listening on "


def server_argv(plan: ServerPlan, port: int) -> list[str]:
    argv = [sys.executable, "-m", "agentos", "serve", "--config", str(plan.profile_path)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--provider-url", plan.provider_url]
    argv += ["--data-dir", str(plan.data_dir)]
    if plan.session_ttl_s is not None:
        argv += ["--session-ttl-secs", str(plan.session_ttl_s)]
    if plan.workers > 1:
        argv += ["--workers", str(plan.workers)]
    return pinned(argv, plan.cpus)


async def start_server_process(plan: ServerPlan, log_dir: Path, port: int | None = None) -> Child:
    """Run `agentos serve` with a profile and wait until `GET /readyz` answers 200 (on `port`, or
    a free one).

    Raises:
        BenchSetupError: it exited or was not ready within `plan.ready_timeout_s`.
    """
    port = free_port() if port is None else port
    log_path = log_dir / f"{plan.log_name}.log"
    plan.data_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *server_argv(plan, port),
            stdout=log,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, **plan.env} if plan.env else None,
        )
    child = Child(name="server", process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    ready = await wait_ready(child, plan.ready_timeout_s)
    if ready and plan.workers > 1:  # /readyz answers once one worker listens; the line, once all do
        ready = await _wait_logged(child, _LISTENING, plan.ready_timeout_s)
    if not ready:
        await stop_child(process)
        raise BenchSetupError(f"server not ready in {plan.ready_timeout_s}s (see {str(log_path)!r})")
    return child


async def wait_ready(child: Child, timeout_s: float, path: str = "/readyz") -> bool:
    """Poll `path` until 200, the process exits, or the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while loop.time() < deadline and child.process.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(f"{child.url}{path}") as response:
                    if response.status == 200:
                        return True
            await asyncio.sleep(0.1)
    return False


async def _wait_logged(child: Child, text: bytes, timeout_s: float) -> bool:
    """Poll the child's log until it holds `text`, the process exits, or the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline and child.process.returncode is None:
        if text in child.log_path.read_bytes():
            return True
        await asyncio.sleep(0.1)
    return False


async def start_job_child(module: str, job_path: Path, log_path: Path) -> asyncio.subprocess.Process:
    """`python -m module job_path`: a bench child that reads its job from the file, prints its
    answers on stdout (`read_line`), its log to `log_path`, and takes commands on stdin."""
    with log_path.open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, str(job_path), stdin=PIPE, stdout=PIPE, stderr=log
        )


async def read_line(process: asyncio.subprocess.Process, timeout_s: float, who: str, what: str) -> bytes:
    """The next line a child (started with `stdout=PIPE`) prints, within `timeout_s`.

    Raises:
        BenchSetupError: no line in time, or the child exited first (`who` and `what` name them).
    """
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout_s)
    except TimeoutError:
        raise BenchSetupError(f"{who}: no {what} in {timeout_s}s") from None
    if not line:
        raise BenchSetupError(f"{who} exited before {what} (rc {await process.wait()})")
    return line


async def stop_child(process: asyncio.subprocess.Process, timeout_s: float = 15.0) -> int | None:
    """SIGTERM the child by pid, SIGKILL it after `timeout_s`; return its exit code."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()
    return process.returncode


def profile_names() -> list[str]:
    """The profiles shipped with the bench kit (package data: `agentos_bench/profiles/<name>.toml`)."""
    return sorted(entry.name.removesuffix(".toml") for entry in _profiles().iterdir() if entry.name.endswith(".toml"))


def resolve_profile(name_or_path: str) -> Path:
    """A profile file: an existing path, else the packaged profile of that name (from any directory).

    Raises:
        BenchSetupError: neither.
    """
    direct = Path(name_or_path)
    if direct.is_file():
        return direct
    packaged = _profiles().joinpath(f"{name_or_path}.toml")
    if "/" not in name_or_path and packaged.is_file():
        return Path(str(packaged))  # pip installs the package unzipped: a real file `agentos serve --config` reads
    raise BenchSetupError(f"profile {name_or_path!r} not found (packaged: {', '.join(profile_names())})")


def _profiles() -> Traversable:
    return importlib.resources.files("agentos_bench").joinpath("profiles")
