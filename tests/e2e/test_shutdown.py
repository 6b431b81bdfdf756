"""Ctrl-C on a real `agentos serve`: the first drains and says what is left, the second stops at once."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import Event
from tests.api.helpers import new_session, turn_events
from tests.conftest import child_env

pytestmark = pytest.mark.slow


async def read_until(stream: asyncio.StreamReader, needle: bytes, timeout_s: float) -> bytes:
    """What `stream` wrote up to and including the first line containing `needle`."""
    seen = b""
    async with asyncio.timeout(timeout_s):
        while needle not in seen:
            line = await stream.readline()
            if not line:
                raise AssertionError(f"the stream ended before {needle!r}: {seen.decode()}")
            seen += line
    return seen


async def test_the_first_ctrl_c_drains_and_the_second_stops_at_once(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(ttft_ms=60_000)  # nothing ends by itself within the 30 s drain
    proc, url = await start_serve(tmp_path, mock.url)
    assert proc.stdout is not None and proc.stderr is not None
    turn: asyncio.Task[list[Event]] | None = None
    try:
        async with http.post(f"{url}/v1/agents", json={"name": "ops"}) as r:
            assert r.status == 201, await r.text()
        async with http.post(f"{url}/v1/agents/ops/runs", json={"input": "tidy up"}) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        turn = asyncio.create_task(turn_events(http, url, await new_session(http, url)))
        await mock.stats.wait_for(lambda s: s.requests == 2, what="the turn and the run to reach the provider")

        proc.send_signal(signal.SIGINT)
        err = await read_until(proc.stderr, b"draining:", 10)
        assert b"draining: 1 turn and 1 run left (up to 30 s); press Ctrl-C again to stop now" in err
        assert not turn.done() and proc.returncode is None  # still draining

        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0  # at once, not after the 30 s drain
        events = await asyncio.wait_for(turn, 10)
        assert (events[-1].name, events[-1].data["reason"]) == ("turn.cancelled", "shutdown")
        err += await proc.stderr.read()
        assert b"stopping now" in err and b"Traceback" not in err, err.decode()
    finally:
        if turn is not None:
            turn.cancel()
        await stop(proc)
    proc, url = await start_serve(tmp_path, mock.url)  # the run was accepted: it is still there
    try:
        async with http.get(f"{url}/v1/runs/{run_id}") as r:
            assert r.status == 200 and (await r.json())["status"] in ("queued", "running")
    finally:
        await stop(proc)


async def test_ctrl_c_with_nothing_to_drain_stops_at_once_and_says_stopped_last(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]
) -> None:
    mock = await mock_factory()
    proc, _ = await start_serve(tmp_path, mock.url)
    assert proc.stderr is not None
    try:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        err = (await proc.stderr.read()).decode()
    finally:
        await stop(proc)
    assert "no turn or run left to drain" in err, err
    assert "press Ctrl-C again" not in err and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].endswith("stopped"), err  # the last line: nothing runs after it


async def start_serve(tmp_path: Path, provider_url: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentos",
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "data"),
        "--provider-url",
        provider_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    except BaseException:
        await stop(proc)
        raise
    if not line.startswith("agentos listening on "):
        await stop(proc)
        assert proc.stderr is not None
        raise AssertionError(f"serve did not start ({proc.returncode}): {line}{(await proc.stderr.read()).decode()}")
    return proc, line.split()[-1]


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
