"""The real `agentos serve` process: kill -9 after turn.completed, SIGTERM drain, bind safety."""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockServer
from tests.api.helpers import new_session, turn_events
from tests.conftest import SRC, child_env

pytestmark = pytest.mark.slow


@asynccontextmanager
async def agentos_process(
    *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    with tempfile.TemporaryFile() as log:  # stderr: read back when the server does not start
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentos",
            "serve",
            "--port",
            "0",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=child_env(**(env or {})),
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            if not line.startswith("agentos listening on "):
                await asyncio.wait_for(proc.wait(), 10)
                log.seek(0)
                raise AssertionError(f"serve did not start ({proc.returncode}): {line}{log.read().decode()}")
            yield proc, line.split()[-1]
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_completed_turns_survive_kill_9(tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession) -> None:
    """Every turn a client saw complete has its answer and its `turn.completed` stored, though
    the event lane sheds (a queue of 2 rows) and the server dies at once after the answers."""
    data, env = str(tmp_path / "data"), {"AGENTOS_STORE_QUEUE_MAX_ROWS": "2"}
    completed: dict[str, list[str]] = {}
    for round_ in range(3):
        async with agentos_process("--data-dir", data, "--provider-url", mock.url, env=env) as (proc, url):
            sessions = [await new_session(http, url) for _ in range(8)]
            results = await asyncio.gather(*(turn_events(http, url, s, f"round {round_}") for s in sessions))
            for sid, events in zip(sessions, results, strict=True):
                assert events[-1].name == "turn.completed"
                completed.setdefault(sid, []).extend(e.data["turn_id"] for e in events if e.name == "turn.completed")
            proc.send_signal(signal.SIGKILL)  # at once, after the clients saw turn.completed
            await proc.wait()
    async with agentos_process("--data-dir", data, "--provider-url", mock.url) as (_, url):
        for sid, turn_ids in completed.items():
            async with http.get(f"{url}/v1/sessions/{sid}/messages") as r:
                messages = (await r.json())["data"]
            stored = {m["turn_id"] for m in messages if m["role"] == "assistant" and m["status"] == "completed"}
            assert set(turn_ids) <= stored, f"{sid} lost a completed turn"
            async with http.get(f"{url}/v1/sessions/{sid}/events") as r:
                events = (await r.json())["data"]
            ended = {e["turn_id"] for e in events if e["type"] == "turn.completed"}
            assert set(turn_ids) <= ended, f"{sid} lost the turn.completed of an acknowledged turn"


async def test_sigterm_drains_and_exits_cleanly(tmp_path: Path, mock_factory, http: aiohttp.ClientSession) -> None:
    mock = await mock_factory(ttft_ms=200, tps=100, tokens=5)
    async with agentos_process("--data-dir", str(tmp_path), "--provider-url", mock.url) as (proc, url):
        sid = await new_session(http, url)
        turn = asyncio.create_task(turn_events(http, url, sid))
        await mock.stats.wait_for(lambda s: s.requests == 1, what="the turn to reach the provider")
        proc.send_signal(signal.SIGTERM)
        events = await turn
        assert events[-1].name == "turn.completed"  # the running turn finished during the drain
        assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_a_public_bind_without_a_token_is_refused(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentos",
        "serve",
        "--host",
        "0.0.0.0",
        "--data-dir",
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"AGENTOS_API_TOKEN" in err and b"server.host" in err


async def test_the_default_starts_the_builtin_mock(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    async with agentos_process("--data-dir", str(tmp_path)) as (_, url):
        sid = await new_session(http, url)
        assert (await turn_events(http, url, sid))[-1].name == "turn.completed"


async def test_a_child_process_runs_the_code_of_this_tree() -> None:
    """A worktree or a clean clone tests its own code, not the `agentos` installed in the venv."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import agentos; print(agentos.__file__)", stdout=asyncio.subprocess.PIPE, env=child_env()
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert Path(out.decode().strip()).is_relative_to(SRC)
