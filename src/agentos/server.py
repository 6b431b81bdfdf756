"""`agentos serve`: bind, run until SIGTERM/SIGINT, then drain and stop; a second signal stops at once."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import logging.handlers
import os
import queue
import resource
import signal
import socket
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path

from aiohttp import web

from agentos.api.app import create_app
from agentos.api.connections import make_runner
from agentos.api.middleware import is_loopback
from agentos.clock import wall_ms
from agentos.config import Settings, resolve_paths
from agentos.coordination.node import node_id
from agentos.errors import ConfigError
from agentos.services import DRAIN_TIMEOUT_S, Services, open_services
from agentos.telemetry.logs import JsonLineFormatter, stamp
from agentos.tenancy.tables import count_usable_keys

log = logging.getLogger("agentos")

ProviderSetup = Callable[[Settings], AbstractAsyncContextManager[Settings]]


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback address unless keys guard the API: `server.api_token`, or a usable
    key in `<data_dir>/tenants.db` or, on the postgres backend, in PostgreSQL (read here, before
    anything starts).

    Raises:
        ConfigError: one line saying how to give the server a key.
    """
    host = settings.server.host
    if settings.server.api_token or is_loopback(host) or _stored_keys(settings):
        return
    raise ConfigError(
        f"server.host: refusing to listen on {host!r} without API keys; set AGENTOS_API_TOKEN or --api-token-file"
        " (`agentos keys generate` makes one), or create a key on a loopback start first"
    )


def _stored_keys(settings: Settings) -> int:
    if not settings.store.enabled:
        return 0
    if settings.store.backend == "postgres":
        from agentos.tenancy import pg_tables  # loads asyncpg: only for this backend

        return pg_tables.count_usable_keys(settings.store, wall_ms())
    path = Path(settings.data_dir) / "tenants.db"
    try:
        return count_usable_keys(path, wall_ms())
    except sqlite3.Error as exc:
        raise ConfigError(f"data_dir: cannot read {str(path)!r} ({exc})") from None


def check_directories(settings: Settings) -> None:
    """`data_dir` (and `jsonl_dir`, when set) exist or can be created, and are writable.

    Raises:
        ConfigError: one line naming the setting and how to choose another.
    """
    if not settings.store.enabled:  # nothing is written: runs keep their workspaces in a temporary directory
        return
    _check_directory("data_dir", settings.data_dir, "--data-dir or AGENTOS_DATA_DIR")
    if settings.jsonl_dir:
        _check_directory("jsonl_dir", settings.jsonl_dir, "AGENTOS_JSONL_DIR")


def _check_directory(key: str, path: str, how: str) -> None:
    directory = Path(path)
    fix = f"choose another with {how}"
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{key}: {path} is not a directory; {fix}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot create {path} ({exc.strerror}); {fix}") from None
    try:  # a real write: permission bits say nothing of a read-only file system, nor of root
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ConfigError(f"{key}: {path} is not writable ({exc.strerror}); {fix}") from None


def check_port(settings: Settings) -> None:
    """The server's address can be listened on: a port in use is found before anything starts.

    The probe binds as the server will (`SO_REUSEADDR`, every address `host` resolves to, an
    address family the OS lacks skipped), then lets go. Port 0 (any free port) is not probed.

    Raises:
        ConfigError: the port is in use, or the address cannot be listened on.
    """
    host, port = settings.server.host, settings.server.port
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(
            f"server.host: cannot resolve {host!r} ({exc.strerror}); set --host or AGENTOS_HOST"
        ) from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                probe.listen(1)
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:  # this family is not enabled (asyncio skips it too)
                    continue
                raise listen_error(settings, exc) from None


def listen_error(settings: Settings, exc: OSError) -> ConfigError:
    """The one-line error for a failed bind of the server's address."""
    where = f"{settings.server.host}:{settings.server.port}"
    fix = "choose another with --port or AGENTOS_PORT"
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"server.port: {where} is already in use; {fix}")
    return ConfigError(f"server.port: cannot listen on {where} ({exc.strerror or exc}); {fix}")


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def tune_gc() -> None:
    """Keep the cyclic GC from stalling the loop under load.

    With the default thresholds, 1000 concurrent turns keep ~10^5 young objects alive, and
    each gen1/gen2 pass walks them all: pauses of 25-110 ms, measured with gc.callbacks at
    c=1000. Freezing the start-up heap and collecting less often brought the longest loop
    lag under 10 ms (docs/benchmarking.md). Turns make little cyclic garbage: refcounting
    frees almost everything, so fewer collections cost little memory.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


class _RecordQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the listener thread as they are: the stock `prepare()` formats them
    first, on the event loop, which is the part worth moving off it. JSON lines need the trace
    ids of the moment, read here, on the loop (`agentos.telemetry.logs.stamp`)."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord], *, stamped: bool) -> None:
        super().__init__(records)
        self._stamped = stamped

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        if self._stamped:
            stamp(record)
        return record


def _configure_logging(
    level: str, log_format: str = "text", worker: int | None = None
) -> logging.handlers.QueueListener:
    """Format and write log lines on a thread of their own: a line per turn at info, formatted
    and flushed on the event loop, cost it about 7% of its time at 300 concurrent turns.
    A worker's lines say which worker (and pid) wrote them: the workers share one stderr."""
    output = logging.StreamHandler(sys.stderr)
    json_lines = log_format == "json"
    tag = "" if worker is None else f"[w{worker} {os.getpid()}] "
    text = logging.Formatter(f"%(asctime)s %(levelname)s %(name)s {tag}%(message)s")
    fields: dict[str, object] = {} if worker is None else {"worker": worker, "pid": os.getpid()}
    output.setFormatter(JsonLineFormatter(fields) if json_lines else text)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, output)
    handler = _RecordQueueHandler(records, stamped=json_lines)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    listener.start()
    return listener


def check_settings(settings: Settings, *, port: bool = True) -> Settings:
    """The start-up checks, cheapest first, on `settings` with its paths resolved (returned):
    a mistake is one line and nothing has started yet (the built-in mock, the store, the fork
    server). `port`: probe the port too (a worker skips it: its siblings hold the port already).

    Raises:
        ConfigError: the address, the port, a directory or the PostgreSQL store cannot be used.
    """
    settings = resolve_paths(settings)
    check_bind(settings)
    check_directories(settings)
    if port:
        check_port(settings)
    if settings.store.enabled and settings.store.backend == "postgres":
        from agentos.store.pg_pool import check_reachable  # loads asyncpg: only for this backend

        check_reachable(settings.store)
    return settings


def run_server(settings: Settings, *, provider_setup: ProviderSetup | None = None, worker: int | None = None) -> int:
    """Check the settings, then serve until SIGTERM/SIGINT.

    `worker`: this process is worker `worker` of `agentos serve --workers N` (`agentos.supervisor`):
    it shares the port with its siblings (SO_REUSEPORT), tags its log lines, and stops on SIGTERM
    only (the supervisor forwards a Ctrl-C as SIGTERM; the terminal's own SIGINT would count twice).

    Raises:
        ConfigError: the address, the port, a directory or the PostgreSQL store cannot be used.
    """
    settings = check_settings(settings, port=worker is None)
    listener = _configure_logging(settings.log_level, settings.telemetry.log_format, worker)
    raise_fd_limit()
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        runner = asyncio.Runner()
    try:
        with runner:
            runner.run(serve(settings, provider_setup=provider_setup, worker=worker))
    finally:
        listener.stop()  # writes out every queued line
    return 0


async def serve(
    settings: Settings,
    started: asyncio.Future[int] | None = None,
    *,
    provider_setup: ProviderSetup | None = None,
    worker: int | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain; a second signal stops at once. `provider_setup`
    may start a provider for the duration and return settings that point at it (the CLI's
    built-in mock). `worker`: see `run_server`."""
    stop = _Stop()
    loop = asyncio.get_running_loop()
    signals = _SIGNALS if worker is None else (signal.SIGTERM,)
    for sig in signals:  # from the start: a Ctrl-C while closing the stores must not cut them short
        loop.add_signal_handler(sig, stop.signal)
    try:
        async with AsyncExitStack() as stack:
            if provider_setup is not None:
                settings = await stack.enter_async_context(provider_setup(settings))
            services = await open_services(settings)
            try:
                await _listen(settings, services, started, stop, worker)
            finally:
                await services.close(0.0 if stop.now.is_set() else DRAIN_TIMEOUT_S)
        log.info("stopped")  # the last line: every store is closed, nothing is left running
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def _listen(
    settings: Settings, services: Services, started: asyncio.Future[int] | None, stop: _Stop, worker: int | None
) -> None:
    runner = make_runner(create_app(services), settings.server, services.metrics, shutdown_timeout=5)
    await runner.setup()
    # Workers share one port: SO_REUSEPORT, and the kernel spreads the connections over them.
    host, port = settings.server.host, settings.server.port
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True, reuse_port=worker is not None)
    try:
        await site.start()
        if worker is not None and settings.server.worker_port_base:
            await _worker_site(runner, settings, worker)
    except OSError as exc:  # taken since `check_port`: still one line, not a traceback
        await runner.cleanup()
        raise listen_error(settings, exc) from None
    except ConfigError:
        await runner.cleanup()
        raise
    port = runner.addresses[0][1]
    tune_gc()
    if worker is not None:
        log.info("worker %d listening: pid %d, node %s", worker, os.getpid(), node_id())
    print(f"agentos listening on http://{settings.server.host}:{port}", flush=True)  # a worker's: to the supervisor
    if started is not None:
        started.set_result(port)
    try:
        await stop.drain.wait()
        await _drain(services, stop)
    finally:
        await runner.cleanup()


async def _worker_site(runner: web.AppRunner, settings: Settings, worker: int) -> None:
    """Worker `worker` on a port of its own too (`server.worker_port_base` + `worker`): there a
    scrape of /metrics reaches this worker, where the shared port reaches whichever the kernel picks.

    Raises:
        ConfigError: that port cannot be listened on.
    """
    port = settings.server.worker_port_base + worker
    try:
        await web.TCPSite(runner, settings.server.host, port, reuse_address=True).start()
    except OSError as exc:
        raise ConfigError(
            f"server.worker_port_base: worker {worker} cannot listen on {settings.server.host}:{port}"
            f" ({exc.strerror or exc}); choose another base"
        ) from None


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stop:
    """The stop signals: the first asks for a drain, the second (or any later one) for a stop now."""

    def __init__(self) -> None:
        self.drain = asyncio.Event()
        self.now = asyncio.Event()

    def signal(self) -> None:
        if self.drain.is_set():
            self.now.set()
        self.drain.set()


async def _drain(services: Services, stop: _Stop) -> None:
    """Let running turns finish (up to DRAIN_TIMEOUT_S) unless `stop.now` comes first: then every
    live turn ends at once with `turn.cancelled` (reason "shutdown"), and `serve` gives runs no
    time to reach their next step (they stay in the journal and resume at the next start).
    What was committed stays either way: the stores are still closed in order."""
    turns, runs = _left(services)
    if (turns, runs) == ("0 turns", "0 runs"):  # nothing to wait for: no drain to cut short
        log.info("stopping: no turn or run left to drain")
        await services.drain(0.0)
        return
    log.warning("draining: %s and %s left (up to %.0f s); press Ctrl-C again to stop now", turns, runs, DRAIN_TIMEOUT_S)
    drain = asyncio.ensure_future(services.drain(DRAIN_TIMEOUT_S))
    now = asyncio.ensure_future(stop.now.wait())
    try:
        await asyncio.wait({drain, now}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        now.cancel()
        if not drain.done():
            drain.cancel()
            await asyncio.wait({drain})  # its cancellation only: ours, if any, still propagates
    if drain.cancelled():
        turns, runs = _left(services)
        log.warning("stopping now: cancelling %s (reason: shutdown) and suspending %s", turns, runs)
        await services.drain(0.0)  # cancels every live turn and waits (briefly) for each to end
    else:
        drain.result()


def _left(services: Services) -> tuple[str, str]:
    """How many turns and agent runs are still working, as words: ("1 turn", "2 runs")."""
    turns = len(list(services.runtime.live_turns))
    runs = services.runs.statistics().active_runs
    return f"{turns} turn{'' if turns == 1 else 's'}", f"{runs} run{'' if runs == 1 else 's'}"
