"""Process entry points for `agentos mock-llm` and its contract check."""

from __future__ import annotations

import asyncio
import signal
import sys

from agentos.mock.loop import raise_fd_limit, run_loop
from agentos.mock.server import MockSettings, start_mock

READY_LINE = "mock-llm listening on "  # then the URL; `agentos_bench.common.mock_process` waits for it


async def _serve(settings: MockSettings, host: str, port: int) -> None:
    server = await start_mock(settings, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(f"{READY_LINE}{server.url}\n")
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
    from agentos.mock.check import check_tools_contract

    problems = run_loop(check_tools_contract(url.rstrip("/")))
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        return 1
    print(f"OK {url}: run_command, run_command, ask_human, final answer; ids stable on replay")
    return 0
