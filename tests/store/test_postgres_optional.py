"""asyncpg is optional: the embedded default (SQLite) never imports it, even with the server's
services opened and closed. A child process, so no other test's import can hide it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.conftest import child_env

_OPEN_AND_CLOSE = """
import asyncio, sys
import agentos.cli, agentos.server
from agentos.config import load_settings
from agentos.services import open_services

async def main():
    overrides = {"data_dir": sys.argv[1], "provider.url": "http://127.0.0.1:9/v1"}
    services = await open_services(load_settings(None, environ={}, overrides=overrides))
    await services.close(0.0)

asyncio.run(main())
print("asyncpg" in sys.modules, "agentos.store.postgres" in sys.modules)
"""


async def test_the_sqlite_backend_never_imports_asyncpg(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _OPEN_AND_CLOSE,
        str(tmp_path / "data"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert out.decode().split() == ["False", "False"]
    assert (tmp_path / "data" / "sessions.db").exists()  # it did open the SQLite store
