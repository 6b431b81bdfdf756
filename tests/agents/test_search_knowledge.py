"""The `search_knowledge` tool: an agent naming collections searches them, within its run's tenant.

The end-to-end tests use the real server, real API keys of two tenants, and the real mock
provider over HTTP in its `tools` scenario, which calls `search_knowledge` with the user's
message when the request offers it, then answers quoting the first excerpt of the result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.agents.knowledge_tool import CITE_INSTRUCTION, format_hits, parse_arguments
from agentos.agents.replay import CallModel, Reconcile, replay
from agentos.agents.tools import builtin_schemas, is_idempotent
from agentos.config import settings_from_dict
from agentos.config.agents import MAX_KNOWLEDGE_COLLECTIONS, parse_agent_spec
from agentos.errors import InvalidInput
from agentos.mock.scenario import SEARCH_KNOWLEDGE, plan_answer
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, sse_events, start_server
from agentos.testing.tenants import create_tenant_key
from tests.agents.test_replay import model, tool
from tests.knowledge.http import create_collection, ready, upload

A, B = "acme", "bravo"
ADMIN_TOKEN = "admin-token-for-the-knowledge-tool"
SCOPES = ["agents:read", "agents:write", "runs:read", "runs:write", "knowledge:read", "knowledge:write"]
REFUNDS = "Refunds are accepted within thirty days of purchase. The quokka desk handles refund requests."

# --- the spec ---


def test_knowledge_offers_the_tool_and_only_then() -> None:
    plain = parse_agent_spec({"name": "a", "tools": []})
    with_docs = parse_agent_spec({"name": "a", "tools": [], "knowledge": ["docs", "faq"]})
    assert builtin_schemas(plain) == []
    assert [s["function"]["name"] for s in builtin_schemas(with_docs)] == [SEARCH_KNOWLEDGE]
    assert with_docs.offers(SEARCH_KNOWLEDGE) and not plain.offers(SEARCH_KNOWLEDGE)
    assert is_idempotent(with_docs, SEARCH_KNOWLEDGE)  # an uncertain search after a crash simply runs again
    approving = parse_agent_spec({"name": "a", "knowledge": ["docs"], "approval_required": [SEARCH_KNOWLEDGE]})
    assert approving.approval_required == (SEARCH_KNOWLEDGE,)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tools": [SEARCH_KNOWLEDGE]}, "tools: 'search_knowledge' is offered by naming collections in `knowledge`"),
        ({"knowledge": ["../etc"]}, "knowledge: collection names must match"),
        ({"knowledge": ["docs", "docs"]}, "knowledge: collection names must be unique"),
        ({"knowledge": [f"c{i}" for i in range(MAX_KNOWLEDGE_COLLECTIONS + 1)]}, "knowledge: at most 16"),
        ({"knowledge": "docs"}, "knowledge"),
        ({"approval_required": [SEARCH_KNOWLEDGE]}, "approval_required: 'search_knowledge' is not one of"),
    ],
)
def test_bad_knowledge_fields_name_the_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_agent_spec({"name": "a", **body})
    assert str(caught.value).startswith(message), str(caught.value)


# --- arguments and the result text ---


def test_arguments_are_checked() -> None:
    assert parse_arguments({"query": "  refunds  "}) == ("refunds", 5)
    assert parse_arguments({"query": "x", "top_k": 20}) == ("x", 20)
    for bad in (
        {},
        {"query": ""},
        {"query": 3},
        {"query": "x", "top_k": 0},
        {"query": "x", "top_k": 21},
        {"query": "x", "top_k": True},
        {"query": "x", "top_k": "5"},
        {"query": "x" * 2001},
    ):
        with pytest.raises(ValueError):
            parse_arguments(bad)


def test_hits_become_numbered_citable_excerpts() -> None:
    hits = [
        {"collection": "docs", "document_id": "doc_1", "title": 'The "policy"', "ordinal": 2, "text": "a\n b  c"},
        {"collection": "faq", "document_id": "doc_2", "title": "", "ordinal": 0, "text": "x" * 5000},
    ]
    text = format_hits(hits)
    lines = text.split("\n\n")
    assert lines[0] == "[1] docs/doc_1 \"The 'policy'\" (chunk 2): a b c"
    assert lines[1].startswith('[2] faq/doc_2 "" (chunk 0): xxx') and lines[1].endswith(" ...")
    assert len(lines[1]) < 1300  # an excerpt is bounded
    assert lines[2] == CITE_INSTRUCTION
    assert format_hits([]) == "No excerpts matched the query."


# --- replay: a finished search is read from the journal, an unfinished one runs again ---


def test_a_completed_search_is_replayed_not_rerun() -> None:
    spec = parse_agent_spec({"name": "a", "knowledge": ["docs"]})
    call = [("c1", SEARCH_KNOWLEDGE)]
    done = replay("", "q", [model(1, call), tool(2, "c1", SEARCH_KNOWLEDGE, "[1] docs/doc_1 ...")], [])
    assert isinstance(done.action, CallModel) and done.action.seq == 3
    assert done.messages[-1]["content"] == "[1] docs/doc_1 ..."
    started = replay("", "q", [model(1, call), tool(2, "c1", SEARCH_KNOWLEDGE, None, status="started")], [])
    assert isinstance(started.action, Reconcile) and is_idempotent(spec, started.action.call.name)


# --- the mock's script ---


def test_the_mock_searches_then_quotes_the_first_citation() -> None:
    tools = frozenset({SEARCH_KNOWLEDGE})
    first = plan_answer("tools", [{"role": "user", "content": "refunds?"}], 4, tools)
    assert first.tool_call is not None and first.tool_call.name == SEARCH_KNOWLEDGE
    assert msgspec.json.decode(first.tool_call.arguments) == {"query": "refunds?"}
    result = '[1] docs/doc_1 "T" (chunk 0): thirty days\n\n' + CITE_INSTRUCTION
    second = plan_answer(
        "tools", [{"role": "user", "content": "refunds?"}, {"role": "tool", "content": result}], 4, tools
    )
    assert second.tool_call is None and second.text == 'According to [1] docs/doc_1 "T" (chunk 0): thirty days'
    # without the tool offered, the scenario is the one agent runs rely on
    agent_tools = frozenset({"run_command", "ask_human"})
    call = plan_answer("tools", [{"role": "user", "content": "x"}], 4, agent_tools).tool_call
    assert call is not None and call.name == "run_command"
    assert plan_answer("tools", [{"role": "user", "content": "x"}], 4).tool_call is None  # a chat turn offers none


# --- end to end ---


@dataclass
class World:
    server: RunningServer
    http: aiohttp.ClientSession
    keys: dict[str, dict[str, str]]

    async def call(self, method: str, path: str, tenant: str, body: Any, status: int) -> Any:
        async with self.http.request(method, self.server.url + path, headers=self.keys[tenant], json=body) as r:
            assert r.status == status, (method, path, await r.text())
            return await r.json()

    async def add_doc(self, tenant: str, text: str, title: str) -> str:
        headers = self.keys[tenant]
        document = await upload(self.http, self.server.url, text, title=title, headers=headers)
        await ready(self.http, self.server.url, document, headers=headers)
        return str(document["document_id"])

    async def run(self, tenant: str, agent: str, text: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """Start a run and follow its events to the end: (run id, [(event, data)])."""
        run = await self.call("POST", f"/v1/agents/{agent}/runs", tenant, {"input": text}, 202)
        events: list[tuple[str, dict[str, Any]]] = []
        url = f"{self.server.url}/v1/runs/{run['run_id']}/events"
        async with self.http.get(url, headers=self.keys[tenant]) as r:
            assert r.status == 200, await r.text()
            async for event in sse_events(r):
                events.append((event.name, event.data))
        return run["run_id"], events


@pytest.fixture
async def world(tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]) -> AsyncIterator[World]:
    mock = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "server": {"api_token": ADMIN_TOKEN}}
    )
    server = await start_server(settings)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            keys = {
                t: (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id=t, scopes=SCOPES)).headers
                for t in (A, B)
            }
            yield World(server, http, keys)
    finally:
        await server.close()


def _tool_events(events: list[tuple[str, dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    return [data for kind, data in events if kind == name and data.get("name") == SEARCH_KNOWLEDGE]


async def test_an_agent_searches_its_collection_and_cites_it(world: World) -> None:
    await create_collection(world.http, world.server.url, headers=world.keys[A])
    doc = await world.add_doc(A, REFUNDS, "Refund policy")
    await world.call("POST", "/v1/agents", A, {"name": "helper", "tools": [], "knowledge": ["docs"]}, 201)
    run_id, events = await world.run(A, "helper", "how long is the refund window")
    assert events[-1][0] == "run.completed", events[-1]
    calls, results = _tool_events(events, "tool.call"), _tool_events(events, "tool.result")
    assert len(calls) == 1 and msgspec.json.decode(calls[0]["arguments"]) == {"query": "how long is the refund window"}
    assert results[0]["content"].startswith(f'[1] docs/{doc} "Refund policy" (chunk 0): Refunds are accepted')
    assert results[0]["content"].endswith(CITE_INSTRUCTION)
    assert events[-1][1]["result"].startswith(f'According to [1] docs/{doc} "Refund policy"')
    # the journal holds the result like any tool result's (what a replay reads instead of searching again)
    steps = await world.server.services.runs.store.load_steps(A, run_id)
    searched = [s for s in steps if s.kind == "tool" and s.input["name"] == SEARCH_KNOWLEDGE]
    assert [s.status for s in searched] == ["done"] and searched[0].output == {"content": results[0]["content"]}


async def test_another_tenants_collection_of_the_same_name_is_out_of_reach(world: World) -> None:
    await create_collection(world.http, world.server.url, headers=world.keys[A])
    a_doc = await world.add_doc(A, REFUNDS, "Refund policy")
    for tenant in (A, B):
        await world.call("POST", "/v1/agents", tenant, {"name": "helper", "tools": [], "knowledge": ["docs"]}, 201)
    # B has no collection "docs": the tool says so, and the run still completes
    _, events = await world.run(B, "helper", "refund window")
    assert events[-1][0] == "run.completed", events[-1]
    content = _tool_events(events, "tool.result")[0]["content"]
    assert content.startswith("error: collection_not_found"), content
    assert a_doc not in str(events)
    # B's own "docs" is what B's agent finds, never A's
    await create_collection(world.http, world.server.url, headers=world.keys[B])
    b_doc = await world.add_doc(B, "Refund requests go to the bravo counter within a week.", "Bravo refunds")
    _, events = await world.run(B, "helper", "refund window")
    content = _tool_events(events, "tool.result")[0]["content"]
    assert f"docs/{b_doc}" in content and a_doc not in str(events)
