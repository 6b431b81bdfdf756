"""An agent defined through the API on one node is everyone's: two real `agentos serve` nodes
on one PostgreSQL schema. Node B never restarts, yet it sees, lists and runs the agent node A
created, and sees it replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import StoreConfig
from tests.coordination.cluster import node_env, serve_nodes

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


async def call(http: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> tuple[int, Any]:
    async with http.request(method, url, json=body) as response:
        return response.status, await response.json()


async def test_an_agent_made_on_node_a_is_seen_and_run_on_node_b(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory()
    async with serve_nodes(2, tmp_path, mock.url, node_env(pg)) as (a, b):
        assert (await call(http, "GET", f"{b.url}/v1/agents/helper"))[0] == 404  # B has loaded its agents
        status, _ = await call(http, "POST", f"{a.url}/v1/agents", {"name": "helper", "system_prompt": "one"})
        assert status == 201
        status, agent = await call(http, "GET", f"{b.url}/v1/agents/helper")
        assert status == 200 and agent["system_prompt"] == "one"
        status, listed = await call(http, "GET", f"{b.url}/v1/agents")
        assert "helper" in [x["name"] for x in listed["data"]]
        status, session = await call(http, "POST", f"{b.url}/v1/sessions", {"agent": "helper"})
        assert status == 201, session
        status, run = await call(http, "POST", f"{b.url}/v1/agents/helper/runs", {"input": "hello"})
        assert status == 202, run
        await call(http, "POST", f"{a.url}/v1/agents", {"name": "helper", "system_prompt": "two"})
        status, agent = await call(http, "GET", f"{b.url}/v1/agents/helper")
        assert agent["system_prompt"] == "two"  # replaced on A, seen on B


async def test_the_openai_front_door_finds_an_agent_made_on_another_node(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, http: aiohttp.ClientSession
) -> None:
    """The front door reads a tenant's agents only when its node heard of a change: an agent made
    on A a moment before (its NOTIFY perhaps not yet heard on B) is still found on B."""
    mock = await mock_factory()
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    async with serve_nodes(2, tmp_path, mock.url, node_env(pg)) as (a, b):
        status, models = await call(http, "GET", f"{b.url}/v1/models")  # B has read the tenant's agents
        assert status == 200 and "helper" not in [m["id"] for m in models["data"]]
        assert (await call(http, "POST", f"{a.url}/v1/agents", {"name": "helper", "system_prompt": "one"}))[0] == 201
        status, answer = await call(http, "POST", f"{b.url}/v1/chat/completions", {"model": "helper", **chat})
        assert status == 200, answer
        status, models = await call(http, "GET", f"{b.url}/v1/models")
        assert "helper" in [m["id"] for m in models["data"]]
        status, missing = await call(http, "POST", f"{b.url}/v1/chat/completions", {"model": "nobody", **chat})
        assert status == 404 and missing["error"]["code"] == "model_not_found"
