"""What the one-off bench scripts share: a free loopback port, the mock and a server started as
processes of their own (before the event loop: no blocking call inside it), their stop, and the
report printed and written. Imported by its siblings (`python bench/scripts/X.py` puts this
folder on `sys.path`)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_mock(port: int, *options: str) -> subprocess.Popen[bytes]:
    """`agentos mock-llm` on `port` with `options` (`--ttft-ms`, `--tokens`, ...)."""
    command = [sys.executable, "-m", "agentos", "mock-llm", "--port", str(port), *options]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(*processes: subprocess.Popen[bytes], wait_s: float = 60.0) -> None:
    """SIGTERM each (the server drains on it), then wait for each, in order."""
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.wait(wait_s)


async def wait_http(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    """Until `url` answers 200 (a minute at most); SystemExit if `proc` exits first."""
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise SystemExit(f"{what} exited with {proc.returncode}")
            try:
                async with http.get(url) as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{what} did not answer at {url}")


def server_source() -> tuple[str, str]:
    """Where the server's code comes from (`PYTHONPATH`: another commit's worktree, else this
    checkout's `src`) and that checkout's short commit, for a report's header."""
    source = os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[2] / "src")  # run from anywhere
    git = ["git", "-C", source, "rev-parse", "--short", "HEAD"]
    return source, subprocess.run(git, capture_output=True, text=True).stdout.strip()


def emit(report: str, out: str) -> None:
    """The report on stdout, and in `out` when one is named."""
    print(report)
    if out:
        Path(out).write_text(report)


def start_server(
    config: Path, port: int, mock_port: int, data_dir: Path, log: IO[bytes], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`agentos serve` with `config` on `port`, the mock on `mock_port` as its provider."""
    command = [sys.executable, "-m", "agentos", "serve", "--config", str(config), "--host", "127.0.0.1",
               "--port", str(port), "--provider-url", f"http://127.0.0.1:{mock_port}/v1",
               "--data-dir", str(data_dir)]  # fmt: skip
    return subprocess.Popen(command, stdout=log, stderr=log, env=env)
