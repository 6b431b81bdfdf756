"""`DELETE /v1/sessions/{id}` leaves nothing readable of the session: its access rows go with it,
and on SQLite no copy of its rows stays in the files' free pages or WAL (`secure_delete` and a
truncated WAL, docs/deployment.md "Retention")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.store.postgres import PostgresStore
from agentos.store.sqlite import SQLiteStore
from agentos.testing import RunningServer
from tests.api.helpers import new_session, turn_events
from tests.postgres import fresh_schema

MARKER = "zebra-quartz-7731"  # in the deleted session's messages only


def file_bytes(data: Path) -> dict[str, bytes]:
    """Every SQLite file of the data dir (with its WAL), as it is on disk now."""
    return {p.name: p.read_bytes() for p in data.iterdir() if p.name.endswith((".db", ".db-wal"))}


async def access_paths(server: RunningServer) -> list[str]:
    store = server.services.runtime.store
    if isinstance(store, SQLiteStore):  # access.db's own writer, after every queued row
        paths: list[str] = await store._access.read(lambda c: [r[0] for r in c.execute("SELECT path FROM access_log")])
        return paths
    assert isinstance(store, PostgresStore)
    rows = await store._fetch(store._lanes[2], "SELECT path FROM access_log")
    return [r[0] for r in rows]


async def test_deleting_a_session_leaves_no_readable_copy_in_the_sqlite_files(
    server_factory, mock: MockServer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    server = await server_factory(mock.url)
    doomed, kept = await new_session(http, server.url), await new_session(http, server.url)
    await turn_events(http, server.url, doomed, f"remember {MARKER} please")
    await turn_events(http, server.url, kept, "kept words")
    async with http.get(f"{server.url}/v1/sessions/{doomed}/messages") as r:
        assert MARKER in await r.text()
    before = file_bytes(tmp_path / "data")
    assert any(MARKER.encode() in b for b in before.values())  # the check can fail

    async with http.delete(f"{server.url}/v1/sessions/{doomed}") as r:
        assert r.status == 204

    after = file_bytes(tmp_path / "data")  # the server still runs: its WAL files are there
    assert [name for name, b in after.items() if MARKER.encode() in b] == []
    paths = await access_paths(server)
    assert [p for p in paths if doomed in p] == [f"/v1/sessions/{doomed}"]  # the DELETE's own, logged after it
    assert f"/v1/sessions/{kept}/turns" in paths  # another session's rows stay


async def test_deleting_an_agent_session_leaves_no_readable_copy_in_runs_db(
    server_factory, mock: MockServer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """An agent's turn is a run: its journal (runs.db) holds the conversation too."""
    server = await server_factory(mock.url)
    async with http.post(f"{server.url}/v1/agents", json={"name": "helper", "tools": []}) as r:
        assert r.status == 201, await r.text()
    doomed = await new_session(http, server.url, agent="helper")
    await turn_events(http, server.url, doomed, f"remember {MARKER} please")
    before = file_bytes(tmp_path / "data")
    assert [name for name, b in before.items() if MARKER.encode() in b and name.startswith("runs.db")]

    async with http.delete(f"{server.url}/v1/sessions/{doomed}") as r:
        assert r.status == 204

    after = file_bytes(tmp_path / "data")
    assert [name for name, b in after.items() if MARKER.encode() in b] == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_deleting_a_session_deletes_its_access_rows(
    backend: str, server_factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    async for config in fresh_schema() if backend == "postgres" else _once():
        pg = {} if config is None else {"store.backend": "postgres", "store.postgres_url": config.postgres_url}
        if config is not None:
            pg["store.postgres_schema"] = config.postgres_schema
        server = await server_factory(mock.url, **pg)
        doomed = await new_session(http, server.url)
        lookalike = doomed[:-1] + ("0" if doomed[-1] != "0" else "1")  # same prefix, another id
        await turn_events(http, server.url, doomed)
        async with http.get(f"{server.url}/v1/sessions/{doomed}/events") as r:
            assert r.status == 200
        async with http.get(f"{server.url}/v1/sessions/{doomed}x/messages") as r:  # a longer id: not its row
            assert r.status == 404
        async with http.get(f"{server.url}/v1/sessions/{lookalike}") as r:
            assert r.status == 404
        assert sum(doomed in p for p in await access_paths(server)) >= 3
        async with http.delete(f"{server.url}/v1/sessions/{doomed}") as r:
            assert r.status == 204
        paths = await access_paths(server)
        # Left: the DELETE's own row (logged after it) and a longer id's, which is not the session's.
        assert sorted(p for p in paths if doomed in p) == [f"/v1/sessions/{doomed}", f"/v1/sessions/{doomed}x/messages"]
        assert f"/v1/sessions/{lookalike}" in paths
        await server.close()


async def _once() -> AsyncIterator[None]:
    yield None
