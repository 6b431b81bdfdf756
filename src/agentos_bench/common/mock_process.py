"""`agentos mock-llm` as a child process of the bench, started and stopped like the server.

It is bound to 127.0.0.1 on a free port and ready once it prints its `listening on` line
(written by `agentos.mock.main`); it is stopped by its pid (`stop_child`).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentos.mock.main import READY_LINE as _READY_LINE
from agentos.mock.server import MockSettings
from agentos_bench.common.pinning import pinned
from agentos_bench.common.processes import BenchSetupError, Child, stop_child


def mock_argv(settings: MockSettings) -> list[str]:
    return [
        *[sys.executable, "-m", "agentos", "mock-llm", "--host", "127.0.0.1", "--port", "0"],
        *["--ttft-ms", str(settings.ttft_ms), "--tps", str(settings.tps), "--tokens", str(settings.tokens)],
        *["--error-rate", str(settings.error_rate), "--fail-every", str(settings.fail_every)],
        *["--hang-rate", str(settings.hang_rate), "--scenario", settings.scenario, "--seed", str(settings.seed)],
    ]


async def start_mock_process(
    settings: MockSettings, log_dir: Path, ready_timeout_s: float = 30.0, cpus: str = ""
) -> Child:
    """Run `agentos mock-llm` (on the cores `cpus`, `agentos_bench.common.pinning`; empty: any)
    and wait for its `listening on` line.

    Raises:
        BenchSetupError: it exited or stayed silent past `ready_timeout_s`.
    """
    log_path = log_dir / "mock-llm.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *pinned(mock_argv(settings), cpus),
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
        )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), ready_timeout_s)
    except TimeoutError:
        line = b""
    text = line.decode().strip()
    if not text.startswith(_READY_LINE):
        await stop_child(process)
        raise BenchSetupError(f"mock-llm did not start (see {str(log_path)!r}): {text!r}")
    return Child(name="mock-llm", process=process, url=text.removeprefix(_READY_LINE), log_path=log_path)
