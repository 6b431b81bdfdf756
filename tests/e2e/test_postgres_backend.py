"""The server on the PostgreSQL store: a chat turn end to end over HTTP, and the start-up
errors of a wrong URL, an unreachable server, a missing driver (one line naming the key).

Real PostgreSQL (tests/postgres.py: a fresh schema per test), real server, real mock provider.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.helpers import new_session, turn_events
from tests.conftest import child_env
from tests.e2e.test_startup_checks import serve_refused

pytest.importorskip("asyncpg")


def on_postgres(pg: StoreConfig) -> dict[str, Any]:
    keys = {"backend": pg.backend, "postgres_url": pg.postgres_url, "postgres_schema": pg.postgres_schema}
    return {f"store.{key}": value for key, value in keys.items()}


async def test_a_chat_turn_on_postgres_lists_its_messages_and_events(
    pg: StoreConfig, server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer, tmp_path: Path
) -> None:  # `pg` first: fixtures are torn down in reverse, so the server stops before its schema is dropped
    server = await server_factory(mock.url, **on_postgres(pg))
    async with aiohttp.ClientSession() as http:
        sid = await new_session(http, server.url, metadata={"on": "postgres"})
        assert (await turn_events(http, server.url, sid, "remember me"))[-1].name == "turn.completed"
        async with http.get(f"{server.url}/v1/sessions/{sid}/messages") as r:
            messages = (await r.json())["data"]
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "remember me"),
            ("assistant", "tok tok tok tok "),
        ]
        async with http.get(f"{server.url}/v1/sessions/{sid}/events") as r:
            assert [e["type"] for e in (await r.json())["data"]] == ["turn.started", "turn.completed"]
        async with http.get(f"{server.url}/v1/sessions/{sid}") as r:
            assert (await r.json())["metadata"] == {"on": "postgres"}
    assert not (tmp_path / "data" / "sessions.db").exists()  # the rows went to PostgreSQL, not SQLite
    asyncpg = pytest.importorskip("asyncpg")
    conn = await asyncpg.connect(pg.postgres_url, server_settings={"search_path": pg.postgres_schema})
    try:
        assert await conn.fetchval("SELECT count(*) FROM messages WHERE session_id = $1", sid) == 2
    finally:
        await conn.close()


@pytest.mark.slow
async def test_an_unreachable_postgres_url_stops_start_up_in_one_line(tmp_path: Path) -> None:
    url = "postgresql://postgres:hunter2@127.0.0.1:1/test"  # nothing listens on port 1
    line = await serve_refused(
        "--port", "0", "--data-dir", str(tmp_path / "data"), "--store-backend", "postgres", "--postgres-url", url
    )
    assert line.startswith("agentos: store.postgres_url: cannot connect to postgresql://postgres@127.0.0.1:1/test (")
    assert "hunter2" not in line


@pytest.mark.slow
async def test_a_postgres_backend_without_a_postgresql_url_is_refused(tmp_path: Path) -> None:
    line = await serve_refused(
        "--port", "0", "--data-dir", str(tmp_path / "data"), env={"AGENTOS_STORE_BACKEND": "postgres"}
    )
    assert "store.postgres_url" in line and "must be a postgresql:// URL" in line


@pytest.mark.slow
async def test_a_postgres_backend_without_asyncpg_names_the_extra(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "asyncpg"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('asyncpg hidden by the test')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shim.parent), child_env()["PYTHONPATH"]])}
    flags = ["--store-backend", "postgres", "--postgres-url", "postgresql://postgres@127.0.0.1:5432/test"]
    line = await serve_refused("--port", "0", "--data-dir", str(tmp_path / "data"), *flags, env=env)
    assert line == (
        "agentos: store.backend: postgres needs the asyncpg driver; install it with pip install 'agentos[postgres]'"
    )
