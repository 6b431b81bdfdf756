"""`agentos serve --workers N`: N server processes on one host, each a node of the cluster path.

Usage (the CLI): `run_workers(settings, [sys.executable, "-m", "agentos.cli.worker"])`.

Theory of operation. A worker is a whole `agentos serve` (`agentos.server.run_server` with
`worker=k`) and a node like any other: its own node id (`agentos.coordination.node`), its own
pools; what the workers share is what nodes share, PostgreSQL (fencing, durable state) and Redis
(cancels, the cluster's provider limit, rate limits and quotas). So N workers keep every guarantee
of N nodes, and `--workers` above 1 without that path is refused (`check_workers`). They listen
on one address with SO_REUSEPORT; the kernel spreads the connections over them.

This process (the supervisor) checks the settings, then starts worker 0 and waits until it
listens (it applies the migrations and makes the key pepper file, and with port 0 picks the
port the others then share), then the rest at once. Each worker reads its orders (`WorkerOrder`,
JSON) on stdin and keeps stdin open: when this process dies, even by kill -9, the workers see
end of file and drain. Each prints its "agentos listening" line on its stdout, a pipe to here;
this process prints one such line once all listen.

SIGINT and SIGTERM are forwarded as SIGTERM (workers ignore SIGINT: a Ctrl-C reaches the whole
process group, and would otherwise count twice): the first drains each worker as a single
server drains, a second stops them at once. A worker that exits while no stop was asked for is
started again, at most `RESTARTS` times in `RESTART_WINDOW_S`, the n-th try after n - 1 seconds;
past that the supervisor stops them all and exits 1. Exit status: 0 when every worker drained
cleanly, else the first other status seen (2: a worker's settings were refused at start).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections import deque
from collections.abc import Sequence

import msgspec

from agentos.config import Settings
from agentos.errors import ConfigError
from agentos.server import check_settings, raise_fd_limit
from agentos.waiting import wait_event

log = logging.getLogger("agentos")

RESTARTS = 5
RESTART_WINDOW_S = 60.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WorkerOrder(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker reads on its stdin (one JSON line): its number and its settings."""

    worker: int
    settings: Settings


class _StartFailed(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def check_workers(settings: Settings) -> None:
    """More than one worker needs the cluster path: what keeps turns right across processes.

    Raises:
        ConfigError: `server.workers` > 1 without the PostgreSQL store and Redis coordination.
    """
    workers = settings.server.workers
    store = settings.store
    if workers == 1:
        return
    if not (store.enabled and store.backend == "postgres" and settings.coordination.redis_url):
        raise ConfigError(
            f"server.workers: {workers} workers need the PostgreSQL store and Redis coordination, which"
            " carry the guarantees across processes (last-wins fencing, durable turns, the provider limit,"
            ' rate limits and quotas); set store.backend = "postgres" with store.postgres_url, and'
            " coordination.redis_url (--store-backend postgres --postgres-url ... --redis-url ...), or run one worker"
        )
    _check_worker_ports(settings)


def _check_worker_ports(settings: Settings) -> None:
    base, workers, port = settings.server.worker_port_base, settings.server.workers, settings.server.port
    if base and base + workers - 1 > 65535:
        raise ConfigError(f"server.worker_port_base: {base} + {workers} workers runs past port 65535")
    if base and base <= port < base + workers:
        raise ConfigError(
            f"server.worker_port_base: the workers' own ports {base}-{base + workers - 1} include server.port {port}"
        )


def run_workers(settings: Settings, command: Sequence[str]) -> int:
    """Check the settings, start `settings.server.workers` workers (`command` runs one), supervise
    them until SIGINT/SIGTERM; the exit status (module docstring).

    Raises:
        ConfigError: the settings cannot serve (`check_workers`, `agentos.server.check_settings`).
    """
    check_workers(settings)
    settings = _with_node_count(check_settings(settings))
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [supervisor] %(message)s",
        stream=sys.stderr,
        force=True,
    )
    raise_fd_limit()  # the workers inherit it
    return asyncio.run(Supervisor(settings, command).run())


def _with_node_count(settings: Settings) -> Settings:
    """`coordination.expected_nodes` counts processes: each worker's share of a limit while Redis
    is away is limit / expected_nodes, so fewer than this host's workers would overshoot it."""
    coordination = settings.coordination
    if coordination.expected_nodes >= settings.server.workers:
        return settings
    coordination = msgspec.structs.replace(coordination, expected_nodes=settings.server.workers)
    return msgspec.structs.replace(settings, coordination=coordination)


def _status_of(proc: asyncio.subprocess.Process) -> int:
    """An exit status as a shell gives it: 128 + n for a process killed by signal n."""
    code = proc.returncode or 0
    return 128 - code if code < 0 else code


class Supervisor:
    """Starts the workers, forwards stop signals, restarts a worker that dies (module docstring)."""

    def __init__(self, settings: Settings, command: Sequence[str], *, restart_delay_s: float = 1.0) -> None:
        self._settings = settings
        self._command = list(command)
        self._restart_delay_s = restart_delay_s  # the n-th restart of a window waits (n - 1) x this
        self._workers: dict[int, asyncio.subprocess.Process] = {}
        self._exits: asyncio.Queue[tuple[int, asyncio.subprocess.Process]] = asyncio.Queue()
        self._stop = asyncio.Event()
        self._restarts: deque[float] = deque()
        self._reapers: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references
        self._status = 0

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self._signal)
        try:
            try:
                await self._start_all()
            except _StartFailed as failed:
                self._status = self._status or failed.code
                self._forward()
            await self._watch()
        finally:
            for sig in _SIGNALS:
                loop.remove_signal_handler(sig)
        log.info("stopped (status %d)", self._status)
        return self._status

    async def _start_all(self) -> None:
        port = await self._start(0)
        server = msgspec.structs.replace(self._settings.server, port=port)
        self._settings = msgspec.structs.replace(self._settings, server=server)
        started = await asyncio.gather(*(self._start(k) for k in range(1, server.workers)), return_exceptions=True)
        for result in started:
            if isinstance(result, BaseException):
                raise result
        pids = " ".join(str(p.pid) for _, p in sorted(self._workers.items()))
        log.info("%d workers listening on port %d: pids %s", server.workers, port, pids)
        print(f"agentos listening on http://{server.host}:{port}", flush=True)

    async def _start(self, index: int) -> int:
        """Start worker `index` and wait until it listens; its port.

        Raises:
            _StartFailed: it exited first (its status).
        """
        proc = await asyncio.create_subprocess_exec(
            *self._command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(msgspec.json.encode(WorkerOrder(worker=index, settings=self._settings)) + b"\n")
        self._workers[index] = proc
        reaper = asyncio.get_running_loop().create_task(self._reap(index, proc))
        self._reapers.add(reaper)
        reaper.add_done_callback(self._reapers.discard)
        line = (await proc.stdout.readline()).decode()
        if not line.startswith("agentos listening on "):
            await proc.wait()
            raise _StartFailed(_status_of(proc))
        if self._stop.is_set():  # a stop came while it started: it missed the forwarded signal
            proc.send_signal(signal.SIGTERM)
        return int(line.rsplit(":", 1)[1])

    async def _reap(self, index: int, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        await self._exits.put((index, proc))

    async def _watch(self) -> None:
        """Until every worker has exited: note each exit, start another unless stopping."""
        while self._workers:
            index, proc = await self._exits.get()
            if self._workers.get(index) is not proc:
                continue
            del self._workers[index]
            code = _status_of(proc)
            if self._stop.is_set():
                self._status = self._status or code
                continue
            log.warning("worker %d (pid %d) exited with status %d; starting another", index, proc.pid, code)
            await self._restart(index)

    async def _restart(self, index: int) -> None:
        while not self._stop.is_set():
            if not await self._may_restart():
                break
            try:
                await self._start(index)
                return
            except _StartFailed as failed:
                log.warning("worker %d exited with status %d while starting", index, failed.code)
        if not self._stop.is_set():
            log.error("workers restarted %d times in %.0f s: stopping them all", RESTARTS, RESTART_WINDOW_S)
            self._status = 1
            self._forward()

    async def _may_restart(self) -> bool:
        """Count a restart against the budget; wait n - 1 seconds before the n-th of the window
        (a stop ends the wait). False: the budget is spent."""
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW_S:
            self._restarts.popleft()
        if len(self._restarts) >= RESTARTS:
            return False
        delay = len(self._restarts) * self._restart_delay_s
        self._restarts.append(now)
        if delay:
            await wait_event(self._stop, delay)
        return not self._stop.is_set()

    def _signal(self) -> None:
        if self._stop.is_set():
            log.warning("stopping now: forwarding the second signal to %d workers", len(self._workers))
        else:
            log.info("draining %d workers", len(self._workers))
        self._forward()

    def _forward(self) -> None:
        """Ask every worker to stop (a second time: at once)."""
        self._stop.set()
        for proc in self._workers.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
