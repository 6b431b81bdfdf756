"""The `openai-responses` wire client: the request translated from the normalized one (pure),
and what only this wire does against the mock's Responses API over real HTTP (cached tokens).
What both new wires do alike is test_wire_contract.py."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentos.errors import ProviderUnsupported
from agentos.providers.base import ChatRequest
from agentos.providers.openai_responses import request_body
from tests.providers.wire_helpers import MockFactory, collect, function_tool, wire_client


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


async def test_usage_counts_cached_tokens(mock_factory: MockFactory, session: aiohttp.ClientSession) -> None:
    """The mock caches all but the last message, as OpenAI caches a prompt's prefix on its own."""
    mock = await mock_factory()
    provider = wire_client(mock, session, "openai-responses")
    request = ChatRequest(
        messages=[{"role": "system", "content": "one two three"}, {"role": "user", "content": "hi"}], retry=False
    )
    _, first = await collect(provider, request)
    _, second = await collect(provider, request)
    assert (first.usage.prompt_tokens, first.usage.cache_read_tokens, first.usage.cache_write_tokens) == (4, 0, 0)
    assert (second.usage.prompt_tokens, second.usage.cache_read_tokens) == (4, 3)
