"""The `anthropic` wire client against the mock's Messages API, over real HTTP: the request
translated from the normalized one, and the stream translated back (text, parallel tool calls,
tool results, usage with cache tokens, every finish reason, errors before and after the first
token, and what the wire cannot express)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from agentos.errors import ProviderHTTPError, ProviderProtocolError, ProviderUnsupported
from agentos.mock.server import MockServer
from agentos.providers.anthropic import request_body
from agentos.providers.base import ChatRequest, Provider, ToolCall
from agentos.providers.wires import client_for
from tests.providers.wire_helpers import AGENT_TOOLS, chat, collect, deltas_before_failure, function_tool, route_to

MockFactory = Callable[..., Awaitable[MockServer]]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def client(mock: MockServer, session: aiohttp.ClientSession, **route: Any) -> Provider:
    return client_for(route_to(mock, "anthropic", **route), session)


# -- the request, translated (pure) ----------------------------------------------------------


def test_system_is_top_level_and_tool_calls_and_results_become_blocks() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list and count"},
        {
            "role": "assistant",
            "content": "on it",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}},
                {"id": "c2", "type": "function", "function": {"name": "wc", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a b"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "2"}]},
        {"role": "user", "content": "and now?"},
    ]
    body = request_body(ChatRequest(messages=messages, tools=[function_tool("ls")]), "claude-x", 4096)
    assert body["system"] == [{"type": "text", "text": "be brief"}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "list and count"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "on it"},
                {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "."}},
                {"type": "tool_use", "id": "c2", "name": "wc", "input": {}},
            ],
        },
        {  # consecutive tool results: one user message
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "a b"},
                {"type": "tool_result", "tool_use_id": "c2", "content": [{"type": "text", "text": "2"}]},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
    ]
    assert body["tools"] == [
        {"name": "ls", "description": "the ls tool", "input_schema": function_tool("ls")["function"]["parameters"]}
    ]
    assert body["max_tokens"] == 4096 and body["model"] == "claude-x" and body["stream"] is True


def test_params_merge_and_cache_prompt_marks_the_system_prompt_and_the_last_tool() -> None:
    request = ChatRequest(
        messages=[{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"}],
        tools=AGENT_TOOLS,
        max_tokens=77,
        params={"cache_prompt": True, "temperature": 0.2},
    )
    body = request_body(request, "m", 4096)
    assert body["system"] == [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
    assert [t.get("cache_control") for t in body["tools"]] == [None, {"type": "ephemeral"}]
    assert body["temperature"] == 0.2 and "cache_prompt" not in body and body["max_tokens"] == 77


def test_content_parts_keep_their_cache_control_and_images_become_image_blocks() -> None:
    mark = {"type": "ephemeral"}
    content = [
        {"type": "text", "text": "look", "cache_control": mark},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
    ]
    body = request_body(ChatRequest(messages=[{"role": "user", "content": content}]), "m", 10)
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "look", "cache_control": mark},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.invalid/cat.png"}},
    ]


@pytest.mark.parametrize(
    ("request_", "feature"),
    [
        (ChatRequest(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]), "'input_audio'"),
        (ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[{"type": "web_search"}]), "'web_search'"),
        (ChatRequest(messages=[{"role": "user", "content": "x"}], params={"n": 2}), "n > 1"),
        (
            ChatRequest(
                messages=[
                    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}
                ]
            ),
            "not a JSON object",
        ),
    ],
)
def test_what_the_wire_cannot_express_is_refused_by_name(request_: ChatRequest, feature: str) -> None:
    with pytest.raises(ProviderUnsupported, match="the anthropic wire cannot express") as raised:
        request_body(request_, "m", 10)
    assert feature in str(raised.value) and not raised.value.retryable
    assert raised.value.code == "provider_unsupported"


# -- the stream, translated back (real HTTP to the mock) ------------------------------------


async def test_text_streams_as_deltas_then_one_completion(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(tokens=4)
    deltas, completion = await collect(client(mock, session), chat("hello there"))
    assert deltas == ["tok "] * 4
    assert completion.text == "tok tok tok tok " and completion.finish_reason == "stop"
    assert completion.tool_calls == ()
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 4)


async def test_parallel_tool_calls_come_back_whole(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    mock = await mock_factory(scenario="parallel")
    deltas, completion = await collect(client(mock, session), chat("go", tools=AGENT_TOOLS))
    assert deltas == [] and completion.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [
        ("run_command", '{"command":["sh","-c","echo step-1 >> effects.log; echo one"]}'),
        ("run_command", '{"command":["sh","-c","echo step-2 >> effects.log; echo two"]}'),
    ]
    assert all(c.call_id.startswith(("call_0_", "call_1_")) for c in completion.tool_calls)


async def test_tool_results_go_back_as_tool_result_blocks(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    """The `tools` script counts the tool results after the last user message: after two it
    asks `ask_human`, so that answer proves the mock read both results of the merged message."""
    mock = await mock_factory(scenario="tools")
    calls = [ToolCall("c1", "run_command", "{}"), ToolCall("c2", "run_command", "{}")]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    _, completion = await collect(client(mock, session), ChatRequest(messages=messages, tools=AGENT_TOOLS, retry=False))
    assert [c.name for c in completion.tool_calls] == ["ask_human"]


async def test_usage_counts_cache_writes_then_reads(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    """`cache_prompt` marks the system prompt: the first call writes it to the cache, the next
    reads it; both are part of prompt_tokens."""
    mock = await mock_factory()
    provider = client(mock, session, cache_prompt=True)
    request = ChatRequest(
        messages=[{"role": "system", "content": "one two three"}, {"role": "user", "content": "hi"}], retry=False
    )
    _, first = await collect(provider, request)
    _, second = await collect(provider, request)
    assert (first.usage.prompt_tokens, first.usage.cache_write_tokens, first.usage.cache_read_tokens) == (4, 3, 0)
    assert (second.usage.prompt_tokens, second.usage.cache_write_tokens, second.usage.cache_read_tokens) == (4, 0, 3)


async def test_max_tokens_is_length_and_a_stop_sequence_is_stop(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(tokens=4)
    deltas, cut = await collect(client(mock, session, max_tokens=2), chat())
    assert (deltas, cut.finish_reason, cut.usage.completion_tokens) == (["tok "] * 2, "length", 2)
    _, stopped = await collect(client(mock, session, stop_sequences=["tok"]), chat())
    assert stopped.finish_reason == "stop"


async def test_key_and_version_headers_are_sent(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    mock = await mock_factory()
    with pytest.raises(ProviderHTTPError) as raised:
        await collect(client(mock, session, api_key=""), chat())
    assert raised.value.status_code == 401 and not raised.value.retryable


@pytest.mark.parametrize(("fault", "status"), [({"fail_every": 1}, 429), ({"error_rate": 1.0}, 529)])
async def test_rate_limits_and_overload_are_retryable_http_errors(
    mock_factory: MockFactory, session: aiohttp.ClientSession, fault: dict[str, Any], status: int
) -> None:
    mock = await mock_factory(retry_after_s=3, **fault)
    with pytest.raises(ProviderHTTPError) as raised:
        await collect(client(mock, session), chat())
    assert raised.value.status_code == status and raised.value.retryable
    assert raised.value.retry_after_s == (3.0 if status == 429 else None)


async def test_an_error_event_before_the_first_token_is_retryable(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(stream_error_after=0)
    deltas, error = await deltas_before_failure(client(mock, session), chat())
    assert deltas == []
    assert isinstance(error, ProviderHTTPError) and error.status_code == 529 and error.retryable
    assert "overloaded_error" in str(error)


async def test_an_error_event_after_the_first_token_ends_the_stream(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(stream_error_after=2)
    deltas, error = await deltas_before_failure(client(mock, session), chat())
    assert deltas == ["tok "] * 2
    assert isinstance(error, ProviderProtocolError) and not error.retryable


async def test_an_unsupported_request_never_reaches_the_provider(
    mock_factory: MockFactory, session: aiohttp.ClientSession
) -> None:
    mock = await mock_factory()
    with pytest.raises(ProviderUnsupported, match="'web_search'"):
        await collect(client(mock, session), chat(tools=[{"type": "web_search"}]))
    assert mock.stats.requests == 0
