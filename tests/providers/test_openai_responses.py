"""The `openai-responses` wire client against the mock's Responses API, over real HTTP: the
request translated from the normalized one, and the stream translated back (text, parallel
function calls, function call outputs, usage with cached tokens, every finish reason, errors
before and after the first token, and what the wire cannot express)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from agentos.errors import ProviderHTTPError, ProviderProtocolError, ProviderUnsupported
from agentos.mock.server import MockServer
from agentos.providers.base import ChatRequest, Provider
from agentos.providers.openai_responses import request_body
from agentos.providers.wires import client_for
from tests.providers.wire_helpers import AGENT_TOOLS, chat, collect, deltas_before_failure, function_tool, route_to

MockFactory = Callable[..., Awaitable[MockServer]]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def client(mock: MockServer, session: aiohttp.ClientSession, **route: Any) -> Provider:
    return client_for(route_to(mock, "openai-responses", **route), session)


def calls_message(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "run_command", "arguments": '{"n": 1}'}} for i in ids
        ],
    }


# -- the request, translated (pure) ----------------------------------------------------------


def test_instructions_input_items_and_function_tools() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
        {**calls_message("c1", "c2"), "content": "on it"},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]},
        {"role": "system", "content": "now answer"},
    ]
    request = ChatRequest(messages=messages, tools=[function_tool("run_command")], max_tokens=50)
    body = request_body(request, "gpt-x", 0, {"temperature": 0})
    assert body["instructions"] == "be brief"
    assert body["input"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "on it"},
        {"type": "function_call", "call_id": "c1", "name": "run_command", "arguments": '{"n": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "run_command", "arguments": '{"n": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"role": "system", "content": "now answer"},  # a later system message stays where it was
    ]
    tool = function_tool("run_command")["function"]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "run_command",
            "parameters": tool["parameters"],
            "strict": False,
            "description": tool["description"],
        }
    ]
    assert (body["max_output_tokens"], body["model"], body["temperature"], body["stream"]) == (50, "gpt-x", 0, True)
    assert body["store"] is False


def test_image_parts_become_input_images() -> None:
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,A"}}]
    body = request_body(ChatRequest(messages=[{"role": "user", "content": content}]), "m", 0)
    assert body["input"][0]["content"] == [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,A", "detail": "auto"},
    ]
    assert "max_output_tokens" not in body


@pytest.mark.parametrize(
    ("request_", "feature"),
    [
        (ChatRequest(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]), "'input_audio'"),
        (ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[{"type": "custom"}]), "'custom'"),
        (ChatRequest(messages=[{"role": "user", "content": "x"}], params={"n": 3}), "n > 1"),
        (ChatRequest(messages=[{"role": "function", "content": "x"}]), "'function'"),
    ],
)
def test_what_the_wire_cannot_express_is_refused_by_name(request_: ChatRequest, feature: str) -> None:
    with pytest.raises(ProviderUnsupported, match="the openai-responses wire cannot express") as raised:
        request_body(request_, "m", 0)
    assert feature in str(raised.value) and not raised.value.retryable


# -- the stream, translated back (real HTTP to the mock) ------------------------------------


async def test_text_streams_as_deltas_then_one_completion(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(tokens=3)
    deltas, completion = await collect(client(mock, session), chat("hello there"))
    assert deltas == ["tok "] * 3
    assert (completion.text, completion.finish_reason, completion.tool_calls) == ("tok tok tok ", "stop", ())
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 3)


async def test_parallel_function_calls_come_back_whole(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(scenario="parallel")
    deltas, completion = await collect(client(mock, session), chat("go", tools=AGENT_TOOLS))
    assert deltas == [] and completion.finish_reason == "tool_calls"
    assert [(c.call_id[:7], c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_0_", "run_command", '{"command":["sh","-c","echo step-1 >> effects.log; echo one"]}'),
        ("call_1_", "run_command", '{"command":["sh","-c","echo step-2 >> effects.log; echo two"]}'),
    ]


async def test_tool_results_go_back_as_function_call_outputs(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    """After two tool results the `tools` script asks `ask_human`: the mock read both outputs."""
    mock = await mock_factory(scenario="tools")
    messages = [
        {"role": "user", "content": "go"},
        calls_message("c1", "c2"),
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    _, completion = await collect(client(mock, session), ChatRequest(messages=messages, tools=AGENT_TOOLS, retry=False))
    assert [c.name for c in completion.tool_calls] == ["ask_human"]


async def test_usage_counts_cached_tokens(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    """The mock caches all but the last message, as OpenAI caches a prompt's prefix on its own."""
    mock = await mock_factory()
    provider = client(mock, session)
    request = ChatRequest(
        messages=[{"role": "system", "content": "one two three"}, {"role": "user", "content": "hi"}], retry=False
    )
    _, first = await collect(provider, request)
    _, second = await collect(provider, request)
    assert (first.usage.prompt_tokens, first.usage.cache_read_tokens, first.usage.cache_write_tokens) == (4, 0, 0)
    assert (second.usage.prompt_tokens, second.usage.cache_read_tokens) == (4, 3)


async def test_max_output_tokens_is_length(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    mock = await mock_factory(tokens=4)
    deltas, cut = await collect(client(mock, session, max_tokens=2), chat())
    assert (deltas, cut.finish_reason, cut.usage.completion_tokens) == (["tok "] * 2, "length", 2)


@pytest.mark.parametrize(("fault", "status"), [({"fail_every": 1}, 429), ({"error_rate": 1.0}, 500)])
async def test_rate_limits_and_server_errors_are_retryable(
    mock_factory: MockFactory, session: aiohttp.ClientSession, fault: dict[str, Any], status: int
) -> None:
    mock = await mock_factory(retry_after_s=2, **fault)
    with pytest.raises(ProviderHTTPError) as raised:
        await collect(client(mock, session), chat())
    assert raised.value.status_code == status and raised.value.retryable


async def test_a_failed_response_before_the_first_token_is_retryable(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(stream_error_after=0)
    deltas, error = await deltas_before_failure(client(mock, session), chat())
    assert deltas == []
    assert isinstance(error, ProviderHTTPError) and error.status_code == 500 and error.retryable


async def test_a_failed_response_after_the_first_token_ends_the_stream(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(stream_error_after=1)
    deltas, error = await deltas_before_failure(client(mock, session), chat())
    assert deltas == ["tok "]
    assert isinstance(error, ProviderProtocolError) and not error.retryable
