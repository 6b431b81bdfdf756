"""Throwaway PostgreSQL and Redis for the cluster chaos campaign: a restart or a stop of the shared
services would break everyone else's work on the machine, so the campaign runs its own.

    pg = await Postgres.start(work_dir)        # initdb in a temp dir owned by `postgres`, a free port
    await pg.stop(); await pg.start_again()    # the same data dir and port
    redis = await RedisServer.start(work_dir)  # no persistence: a restart comes back empty

Each is a child process of this one, stopped by its own pid (never by name). PostgreSQL refuses to
run as root, so where this process is root its binaries run as the `postgres` user (`user=`), with
a data dir that user owns, trust auth on 127.0.0.1 only. `services_problem()` says why the
campaign cannot start them (binaries missing, no `postgres` user): the faults that need them are
then reported skipped with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agentos_bench.common.processes import BenchSetupError, free_port

PG_BIN = Path(os.environ.get("AGENTOS_BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
REDIS_SERVER = Path(os.environ.get("AGENTOS_BENCH_REDIS_SERVER", "/usr/bin/redis-server"))
_READY_S = 30.0


def services_problem() -> str | None:
    """Why a throwaway PostgreSQL and Redis cannot be started here (None: they can)."""
    for path in (PG_BIN / "initdb", PG_BIN / "postgres", REDIS_SERVER):
        if not os.access(path, os.X_OK):
            return f"{path} not found (set AGENTOS_BENCH_PG_BIN / AGENTOS_BENCH_REDIS_SERVER)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run PostgreSQL as"
    return None


def _pg_user() -> str | None:
    return "postgres" if os.geteuid() == 0 else None


def _as_pg_user(argv: list[str]) -> list[str]:
    """`argv` run as the `postgres` user where we are root: a Python trampoline that drops to it
    and execs (the pid stays the one we started, so we stop what we started by its pid)."""
    if (user := _pg_user()) is None:
        return argv
    entry = pwd.getpwnam(user)
    drop = (
        f"import os, sys; os.setgroups([]); os.setgid({entry.pw_gid}); os.setuid({entry.pw_uid}); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", drop, *argv]


@dataclass(kw_only=True)
class Postgres:
    data_dir: Path
    port: int
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    starts: int = field(default=0)

    @property
    def url(self) -> str:
        user = _pg_user() or pwd.getpwuid(os.geteuid()).pw_name
        return f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    @classmethod
    async def start(cls, log_dir: Path) -> Postgres:
        """initdb a fresh cluster and start it.

        Raises:
            BenchSetupError: initdb failed or the server did not accept connections in time.
        """
        home = Path(tempfile.mkdtemp(prefix="agentos-chaos-pg-"))  # not under the work dir: `postgres` may not enter it
        if user := _pg_user():
            entry = pwd.getpwnam(user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        pg = cls(data_dir=home / "data", port=free_port(), log_path=log_dir / "postgres.log")
        owner = user or pwd.getpwuid(os.geteuid()).pw_name
        try:
            await _run(
                [str(PG_BIN / "initdb"), "-D", str(pg.data_dir), "-A", "trust", "-U", owner, "--no-sync"], pg.log_path
            )
            await pg.start_again()
        except BaseException:  # nothing of ours left behind: the server stopped, its directory removed
            await pg.close()
            raise
        return pg

    async def start_again(self) -> None:
        """Start the server on its data dir and port; wait until it accepts a connection."""
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.data_dir),
            "max_connections": "300",
            "fsync": "off",
            "full_page_writes": "off",
        }
        argv = [str(PG_BIN / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        argv += [arg for name, value in options.items() for arg in ("-c", f"{name}={value}")]
        self.process = await _start(_as_pg_user(argv), self.log_path)
        self.starts += 1
        await _wait_port(self.port, self.process, "postgres")

    async def stop(self) -> None:
        """A fast shutdown (SIGINT to the postmaster: sessions ended, a clean checkpoint)."""
        await _stop(self.process, signal.SIGINT)

    async def close(self) -> None:
        await self.stop()
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


@dataclass(kw_only=True)
class RedisServer:
    port: int
    log_path: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    async def start(cls, log_dir: Path) -> RedisServer:
        redis = cls(port=free_port(), log_path=log_dir / "redis.log")
        await redis.start_again()
        return redis

    async def start_again(self) -> None:
        """Start on the same port, empty (no persistence: what a restart without it gives)."""
        options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "save": "",
            "appendonly": "no",
            "daemonize": "no",
            "maxclients": "2000",
        }
        argv = [str(REDIS_SERVER), *(arg for name, value in options.items() for arg in (f"--{name}", value))]
        self.process = await _start(argv, self.log_path)
        await _wait_port(self.port, self.process, "redis-server")

    async def stop(self) -> None:
        await _stop(self.process, signal.SIGTERM)


async def _run(argv: list[str], log_path: Path) -> None:
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *_as_pg_user(argv), stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
        )
    if await asyncio.wait_for(process.wait(), 120) != 0:
        raise BenchSetupError(f"{Path(argv[0]).name} failed (see {str(log_path)!r})")


async def _start(argv: list[str], log_path: Path) -> asyncio.subprocess.Process:
    """`argv` started with its output appended to `log_path` and nothing on its stdin."""
    with log_path.open("ab") as log:
        return await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL)


async def _wait_port(port: int, process: asyncio.subprocess.Process, who: str) -> None:
    """Until 127.0.0.1:`port` accepts a connection (and, for PostgreSQL, answers a query)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _READY_S
    while loop.time() < deadline and process.returncode is None:
        if await _answers(port, who):
            return
        await asyncio.sleep(0.1)
    raise BenchSetupError(f"{who} on port {port} not ready in {_READY_S}s (rc {process.returncode})")


async def _answers(port: int, who: str) -> bool:
    try:
        if who == "postgres":
            import asyncpg

            user = _pg_user() or pwd.getpwuid(os.geteuid()).pw_name
            conn = await asyncpg.connect(host="127.0.0.1", port=port, user=user, database="postgres", timeout=2)
            await conn.close()
            return True
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        writer.close()
        return True
    except Exception:  # not up yet, or starting ("the database system is starting up")
        return False


async def _stop(process: asyncio.subprocess.Process | None, sig: signal.Signals) -> None:
    """Signal our child by its pid; SIGKILL after 30 s."""
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, sig)
    try:
        await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        await process.wait()
