"""The package layout as a running program sees it: `agentos` and `agentos serve` never load the
bench kit (`agentos_bench`), which is a client of the server (pyproject's import-linter contracts
hold the same rule for the source; this checks the modules a real process loads)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from agentos.client import AsyncClient
from tests.conftest import child_env

_PROBE = """
import sys
import agentos, agentos.cli, agentos.server, agentos.services, agentos.api.app, agentos.mock.builtin
from agentos.cli import build_parser
build_parser(with_bench=sys.argv[1] == "with-bench")
print(" ".join(sorted(m for m in sys.modules if m == "agentos_bench" or m.startswith("agentos_bench."))))
"""


async def _loaded_bench_modules(mode: str) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROBE,
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode().split()


async def test_the_product_and_its_command_line_load_no_bench_module() -> None:
    assert await _loaded_bench_modules("plain") == []
    # the probe sees the bench kit when it is loaded: `agentos bench ...` registers its commands
    assert "agentos_bench.cli" in await _loaded_bench_modules("with-bench")


@pytest.mark.slow
async def test_a_started_server_loads_no_bench_module(tmp_path: Path) -> None:
    """`agentos serve` with the built-in mock, a turn through it, then every module it imported
    (`-X importtime` names each on stderr): the mock's, never the bench kit's."""
    argv = ["-X", "importtime", "-m", "agentos", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    with (tmp_path / "stderr").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=log, env=child_env()
        )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("agentos listening on "), (tmp_path / "stderr").read_text()[-2000:]
        url = line.split()[-1]
        async with AsyncClient(url) as client:
            session = await client.create_session()
            result = await client.send_turn(session.session_id, "hello")
        assert result.status == "completed" and result.output
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    imported = [row.rsplit("|", 1)[-1].strip() for row in (tmp_path / "stderr").read_text().splitlines()]
    assert "agentos.mock.server" in imported and "agentos.runtime" in imported  # the list is the real one
    assert [m for m in imported if m.startswith("agentos_bench")] == []
    # tracing off (the default): nothing of OpenTelemetry is loaded (docs/observability.md)
    assert [m for m in imported if m.startswith("opentelemetry")] == []
    # no JWT seen: neither pyjwt nor cryptography (about 16 MB of RSS) is loaded (docs/security.md)
    assert [m for m in imported if m.split(".")[0] in ("jwt", "cryptography")] == []
