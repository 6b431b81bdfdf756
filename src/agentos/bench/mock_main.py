"""Process entry points for `agentos mock-llm` and its contract check."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from agentos.bench.mock_llm import MockSettings, start_mock

T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on uvloop where it is installed, else on the stdlib loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run(main)
    return uvloop.run(main)


def raise_fd_limit() -> int:
    """Raise the soft open-files limit as far as the hard limit allows; return the new soft limit."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            return soft
    return soft


async def _serve(settings: MockSettings, host: str, port: int) -> None:
    server = await start_mock(settings, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(f"mock-llm listening on {server.url}\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await server.close()


def serve_mock(settings: MockSettings, host: str, port: int) -> int:
    raise_fd_limit()
    run_loop(_serve(settings, host, port))
    return 0


def check_mock(url: str) -> int:
    from agentos.bench.mock_check import check_tools_contract

    problems = run_loop(check_tools_contract(url.rstrip("/")))
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        return 1
    print(f"OK {url}: run_command, run_command, ask_human, final answer; ids stable on replay")
    return 0
