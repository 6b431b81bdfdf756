"""LangChain's `ChatOpenAI` against the real server: an agent's answer, and a client's own tools.

Real server, real mock provider in its `light` scenario (a request that offers tools gets two
`run_command` calls, then the answer; one that offers none, the answer), real SQLite. With the
provider's plain model the client's tools go to the model and LangChain runs the calls itself
(the tool loop below is the one LangChain agents run); an agent (`ops`) runs its own tools and
LangChain sees only the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server

MOCK_TEXT = "tok tok tok tok"
AGENTS = {"ops": {"tools": ["run_command"], "command": {"timeout_s": 10}}}


@tool
def run_command(command: list[str]) -> str:
    """Run a command on the client's side (here: only say what would run)."""
    return "ran " + " ".join(command)


@pytest.fixture
async def server(tmp_path: Path, mock_factory) -> AsyncIterator[RunningServer]:
    mock: MockServer = await mock_factory(scenario="light")
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url, "retry_budget_s": 2.0}, "agents": AGENTS}
    )
    running = await start_server(settings)
    yield running
    await running.close()


def chat(server: RunningServer, model: str) -> ChatOpenAI:
    return ChatOpenAI(base_url=f"{server.url}/v1", api_key=SecretStr("unused-on-loopback"), model=model, max_retries=0)


async def test_an_agent_answers_langchain(server: RunningServer) -> None:
    llm = chat(server, "ops")
    answer = await llm.ainvoke("build it")
    chunks = [c async for c in llm.astream("build it")]
    assert isinstance(answer, AIMessage) and answer.content and not answer.tool_calls
    assert "".join(str(c.content) for c in chunks) == answer.content


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
async def test_client_tools_round_trip_with_the_plain_model(server: RunningServer, streamed: bool) -> None:
    llm = chat(server, "mock-1").bind_tools([run_command])
    messages: list[BaseMessage] = [HumanMessage("clean up")]
    calls = 0
    for _ in range(4):  # the scenario answers after two calls; more would be a bug
        reply = await _reply(llm, messages, streamed)
        messages.append(reply)
        if not reply.tool_calls:
            break
        call = reply.tool_calls[0]
        assert call["name"] == "run_command" and call["args"]["command"][0] == "sh" and call["id"]
        messages.append(ToolMessage(run_command.invoke(call["args"]), tool_call_id=call["id"]))
        calls += 1
    assert calls == 2 and str(messages[-1].content).strip() == MOCK_TEXT


async def _reply(llm, messages: list[BaseMessage], streamed: bool) -> AIMessage:
    if not streamed:
        reply: AIMessage = await llm.ainvoke(messages)
        return reply
    total: AIMessageChunk | None = None
    async for chunk in llm.astream(messages):
        total = chunk if total is None else total + chunk
    assert total is not None
    return total
