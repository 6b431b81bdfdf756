"""The `anthropic` wire client: the request translated from the normalized one (pure), and what
only this wire does against the mock's Messages API over real HTTP (cache writes and reads, a
stop sequence, the key header). What both new wires do alike is test_wire_contract.py."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.config.provider import routes
from agentos.errors import ProviderHTTPError, ProviderUnsupported
from agentos.providers.anthropic import request_body
from agentos.providers.base import ChatRequest
from tests.providers.wire_helpers import AGENT_TOOLS, MockFactory, chat, collect, function_tool, wire_client

# -- the request, translated (pure) ----------------------------------------------------------


def test_system_is_top_level_and_tool_calls_and_results_become_blocks() -> None:
    messages: list[dict[str, Any]] = [
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


async def test_usage_counts_cache_writes_then_reads(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    """`cache_prompt` marks the system prompt: the first call writes it to the cache, the next
    reads it; both are part of prompt_tokens."""
    mock = await mock_factory()
    provider = wire_client(mock, session, "anthropic", cache_prompt=True)
    request = ChatRequest(
        messages=[{"role": "system", "content": "one two three"}, {"role": "user", "content": "hi"}], retry=False
    )
    _, first = await collect(provider, request)
    _, second = await collect(provider, request)
    assert (first.usage.prompt_tokens, first.usage.cache_write_tokens, first.usage.cache_read_tokens) == (4, 3, 0)
    assert (second.usage.prompt_tokens, second.usage.cache_write_tokens, second.usage.cache_read_tokens) == (4, 0, 3)


async def test_a_stop_sequence_is_stop(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    """A target param (`stop_sequences`) reaches the API; `stop_sequence` comes back as `stop`."""
    mock = await mock_factory(tokens=4)
    deltas, stopped = await collect(wire_client(mock, session, "anthropic", stop_sequences=["tok"]), chat())
    assert (deltas, stopped.finish_reason) == (["tok "], "stop")


async def test_without_a_key_the_api_answers_401(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    mock = await mock_factory()
    with pytest.raises(ProviderHTTPError) as raised:
        await collect(wire_client(mock, session, "anthropic", api_key=""), chat())
    assert raised.value.status_code == 401 and not raised.value.retryable


def test_an_anthropic_target_without_max_tokens_asks_for_4096() -> None:
    """The Messages API requires max_tokens: the route carries the default, so the router's
    budget reservation counts it as the call's worst case; other kinds leave it to the provider."""
    settings = settings_from_dict(
        {
            "providers": {
                "a": {"kind": "anthropic", "url": "http://127.0.0.1:9/v1"},
                "r": {"kind": "openai-responses", "url": "http://127.0.0.1:9/v1"},
                "capped": {"kind": "anthropic", "url": "http://127.0.0.1:9/v1", "max_tokens": 100},
            },
            "models": {"m": {"targets": [{"provider": p, "model": "x"} for p in ("a", "r", "capped")]}},
        }
    )
    table, _ = routes(settings.provider, settings.providers, settings.models, settings.routing)
    assert [route.max_tokens for route in table["m"]] == [4096, 0, 100]
