"""The official SDKs parse the mock provider's Anthropic and Responses wires: what the wire
clients are tested against is what the real services send (text, tool use / function calls,
usage with cache tokens, stop reasons, errors). Real HTTP to the mock on a loopback port."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import ToolUseBlock
from openai.types.responses import ResponseCompletedEvent, ResponseFunctionToolCall, ResponseStreamEvent

from agentos.mock.server import MockServer

MockFactory = Callable[..., Awaitable[MockServer]]
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "run_command", "description": "run it", "input_schema": {"type": "object"}},
    {"name": "ask_human", "description": "ask", "input_schema": {"type": "object"}},
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": name, "parameters": {"type": "object"}, "strict": False}
    for name in ("run_command", "ask_human")
]


def anthropic_client(mock: MockServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="mock-key", base_url=mock.url.removesuffix("/v1"), max_retries=0)


def openai_client(mock: MockServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="mock-key", base_url=mock.url, max_retries=0)


def completed_call(events: list[ResponseStreamEvent]) -> ResponseFunctionToolCall:
    """The first output item of the response a stream completed with, checked to be a function call."""
    done = events[-1]
    assert isinstance(done, ResponseCompletedEvent)
    call = done.response.output[0]
    assert isinstance(call, ResponseFunctionToolCall)
    return call


async def test_anthropic_stream_text_and_cache_usage(mock_factory: MockFactory) -> None:
    mock = await mock_factory(tokens=3)
    system: Any = [{"type": "text", "text": "one two three", "cache_control": {"type": "ephemeral"}}]
    async with anthropic_client(mock) as client:
        for expected_write, expected_read in ((3, 0), (0, 3)):
            async with client.messages.stream(
                model="claude-mock", max_tokens=64, system=system, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                text = "".join([t async for t in stream.text_stream])
                message = await stream.get_final_message()
            assert text == "tok tok tok " and message.stop_reason == "end_turn"
            assert [b.type for b in message.content] == ["text"]
            usage = message.usage
            assert (usage.input_tokens, usage.output_tokens) == (1, 3)
            assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (expected_write, expected_read)


async def test_anthropic_create_stream_parallel_tool_use(mock_factory: MockFactory) -> None:
    mock = await mock_factory(scenario="parallel")
    async with anthropic_client(mock) as client:
        stream = await client.messages.create(
            model="claude-mock",
            max_tokens=64,
            tools=ANTHROPIC_TOOLS,
            messages=[{"role": "user", "content": "go"}],
            stream=True,
        )
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    tool_uses = [b for b in starts if isinstance(b, ToolUseBlock)]
    assert tool_uses == starts  # every block started is a tool use
    assert [(b.type, b.name) for b in tool_uses] == [("tool_use", "run_command"), ("tool_use", "run_command")]
    pieces: dict[int, str] = {}
    for e in events:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            pieces[e.index] = pieces.get(e.index, "") + e.delta.partial_json
    assert pieces[1] == '{"command":["sh","-c","echo step-2 >> effects.log; echo two"]}'
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.delta.stop_reason == "tool_use" and delta.usage.output_tokens == 4


async def test_anthropic_tool_results_and_max_tokens(mock_factory: MockFactory) -> None:
    mock = await mock_factory(scenario="tools", tokens=4)
    messages: Any = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"c{i}", "name": "run_command", "input": {}} for i in (1, 2)],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{i}", "content": "ok"} for i in (1, 2)]},
    ]
    async with anthropic_client(mock) as client:
        async with client.messages.stream(
            model="claude-mock", max_tokens=64, tools=ANTHROPIC_TOOLS, messages=messages
        ) as stream:
            asked = await stream.get_final_message()
        async with client.messages.stream(
            model="claude-mock", max_tokens=2, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            cut = await stream.get_final_message()
    tool_use = asked.content[0]
    assert tool_use.type == "tool_use" and tool_use.name == "ask_human"
    assert tool_use.input == {"question": "Proceed with the final answer?"}
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2


async def test_anthropic_overload_is_a_529_overloaded_error(mock_factory: MockFactory) -> None:
    mock = await mock_factory(error_rate=1.0)
    async with anthropic_client(mock) as client:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 529
    assert isinstance(raised.value.body, dict) and raised.value.body["error"]["type"] == "overloaded_error"


async def test_responses_stream_text_and_usage(mock_factory: MockFactory) -> None:
    mock = await mock_factory(tokens=3)
    async with openai_client(mock) as client:
        for cached in (0, 3):
            stream = await client.responses.create(
                model="gpt-mock", instructions="one two three", input="hi", stream=True
            )
            events = [event async for event in stream]
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            done = events[-1]
            assert text == "tok tok tok " and done.type == "response.completed"
            assert done.response.output_text == text and done.response.status == "completed"
            usage = done.response.usage
            assert usage is not None
            assert (usage.input_tokens, usage.output_tokens, usage.input_tokens_details.cached_tokens) == (4, 3, cached)


async def test_responses_parallel_function_calls_and_outputs(mock_factory: MockFactory) -> None:
    mock = await mock_factory(scenario="tools")
    async with openai_client(mock) as client:
        stream = await client.responses.create(model="gpt-mock", input="go", tools=RESPONSES_TOOLS, stream=True)
        first = [event async for event in stream]
        call = completed_call(first)
        assert call.type == "function_call" and call.name == "run_command"
        arguments = "".join(e.delta for e in first if e.type == "response.function_call_arguments.delta")
        assert arguments == call.arguments
        history: Any = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "run_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call", "call_id": "c2", "name": "run_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "two"},
        ]
        stream = await client.responses.create(model="gpt-mock", input=history, tools=RESPONSES_TOOLS, stream=True)
        second = [event async for event in stream]
    asked = completed_call(second)
    assert asked.type == "function_call" and asked.name == "ask_human"


async def test_responses_incomplete_and_failed(mock_factory: MockFactory) -> None:
    mock = await mock_factory(tokens=4, stream_error_after=-1)
    async with openai_client(mock) as client:
        stream = await client.responses.create(model="gpt-mock", input="hi", max_output_tokens=2, stream=True)
        cut = [event async for event in stream][-1]
    assert cut.type == "response.incomplete" and cut.response.incomplete_details is not None
    assert cut.response.incomplete_details.reason == "max_output_tokens"
    failing = await mock_factory(stream_error_after=1)
    async with openai_client(failing) as client:
        stream = await client.responses.create(model="gpt-mock", input="hi", stream=True)
        failed = [event async for event in stream][-1]
    assert failed.type == "response.failed" and failed.response.error is not None
    assert failed.response.error.code == "server_error"


async def test_whole_answers_without_stream(mock_factory: MockFactory) -> None:
    """A request without `stream` gets the answer as one message / one response object."""
    mock = await mock_factory(scenario="parallel", tokens=2)
    async with anthropic_client(mock) as claude:
        message = await claude.messages.create(
            model="claude-mock", max_tokens=64, tools=ANTHROPIC_TOOLS, messages=[{"role": "user", "content": "go"}]
        )
        text = await claude.messages.create(
            model="claude-mock", max_tokens=64, messages=[{"role": "user", "content": "x"}]
        )
    assert message.stop_reason == "tool_use" and [b.type for b in message.content] == ["tool_use", "tool_use"]
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == {"command": ["sh", "-c", "echo step-2 >> effects.log; echo two"]}
    assert text.content[0].type == "text" and text.content[0].text == "tok tok " and text.usage.output_tokens == 2
    async with openai_client(mock) as client:
        response = await client.responses.create(model="gpt-mock", input="go", tools=RESPONSES_TOOLS)
        cut = await client.responses.create(model="gpt-mock", input="x", max_output_tokens=1)
    assert [(item.type, getattr(item, "name", None)) for item in response.output] == [
        ("function_call", "run_command"),
        ("function_call", "run_command"),
    ]
    assert cut.status == "incomplete" and cut.output_text == "tok "


async def test_anthropic_error_event_in_the_stream(mock_factory: MockFactory) -> None:
    """An overload reported inside the stream (after `message_start`) is an error the SDK raises."""
    mock = await mock_factory(stream_error_after=0)
    async with anthropic_client(mock) as client:
        stream = await client.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as raised:
            async for event in stream:
                seen.append(event.type)
    assert seen == ["message_start"]  # the SDK passes pings over
    assert isinstance(raised.value.body, dict) and raised.value.body["error"]["type"] == "overloaded_error"
