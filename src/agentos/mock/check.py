"""Verify the `tools` scenario contract against a running mock, before a campaign trusts it.

Usage::

    problems = await check_tools_contract("http://127.0.0.1:4020/v1")
    assert not problems, problems

It walks one conversation: two `run_command` calls whose `command` is an argv array, then
`ask_human` with a `question` string, then a final text answer; and it replays the first request to
check that tool call ids are stable.
"""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import msgspec

from agentos.mock.chat_stream import ChatAnswer, add_chunk
from agentos.mock.scenario import expected_tool_steps
from agentos.providers.sse_parser import SSEParser

_TIMEOUT = aiohttp.ClientTimeout(total=30)


# What an agent run offers the model (the scenario scripts tool calls only for a request that
# offers tools: a chat turn offers none and gets a plain answer).
AGENT_TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("run_command", "ask_human")
]


async def stream_answer(session: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]]) -> ChatAnswer:
    """POST one streamed chat completion and fold its chunks into a `ChatAnswer`."""
    body = {"model": "mock-1", "stream": True, "messages": messages, "tools": AGENT_TOOLS}
    answer, parser = ChatAnswer(), SSEParser()
    async with session.post(f"{url}/chat/completions", json=body) as response:
        if response.status != 200:
            raise AssertionError(f"chat completion answered {response.status}: {await response.text()!r}")
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                add_chunk(answer, event.data)
    return answer


def _tool_call_problems(step: int, answer: ChatAnswer, scenario: str = "tools") -> list[str]:
    name, expected = expected_tool_steps(scenario)[step]
    if answer.finish_reason != "tool_calls" or len(answer.tool_calls) != 1:
        return [f"step {step + 1}: expected one tool call with finish_reason 'tool_calls', got {answer!r}"]
    call = answer.tool_calls[0]
    problems: list[str] = []
    if call.name != name:
        problems.append(f"step {step + 1}: expected tool {name!r}, got {call.name!r}")
    try:
        arguments = msgspec.json.decode(call.arguments)
    except msgspec.DecodeError:
        return [*problems, f"step {step + 1}: arguments are not JSON: {call.arguments!r}"]
    problems.extend(_argument_problems(step, name, arguments, expected))
    if not call.call_id:
        problems.append(f"step {step + 1}: tool call has no id")
    return problems


def _argument_problems(step: int, name: str, arguments: Any, expected: dict[str, Any]) -> list[str]:
    if name == "run_command":
        command = arguments.get("command") if isinstance(arguments, dict) else None
        if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
            return [f"step {step + 1}: run_command.command must be an argv array of strings, got {command!r}"]
    elif name == "ask_human" and not isinstance(arguments.get("question"), str):
        return [f"step {step + 1}: ask_human.question must be a string, got {arguments!r}"]
    if arguments != expected:
        return [f"step {step + 1}: arguments {arguments!r} differ from the contract {expected!r}"]
    return []


def _follow_up(messages: list[dict[str, Any]], answer: ChatAnswer, step: int) -> list[dict[str, Any]]:
    """The conversation after the tool call ran: the assistant turn plus a `tool` result."""
    call = answer.tool_calls[0]
    function = {"name": call.name, "arguments": call.arguments}
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call.call_id, "type": "function", "function": function}],
    }
    result = {"role": "tool", "tool_call_id": call.call_id, "content": f"result of step {step + 1}"}
    return [*messages, assistant, result]


async def check_tools_contract(url: str, scenario: str = "tools") -> list[str]:
    """Walk the scripted conversation of `scenario` against the mock at `url` (…/v1); return the
    problems found (a mock running another scenario fails at the first step that differs)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"contract check {uuid.uuid4().hex}"}]
    problems: list[str] = []
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        first_ids: list[str] = []
        for step in range(len(expected_tool_steps(scenario))):
            answer = await stream_answer(session, url, messages)
            step_problems = _tool_call_problems(step, answer, scenario)
            if step_problems:
                return problems + step_problems
            first_ids.append(answer.tool_calls[0].call_id)
            messages = _follow_up(messages, answer, step)
        final = await stream_answer(session, url, messages)
        if final.finish_reason != "stop" or final.tool_calls or not final.text:
            problems.append(f"final: expected a text answer with finish_reason 'stop', got {final!r}")
        if not final.done:
            problems.append("final: the stream did not end with data: [DONE]")
        replay = await stream_answer(session, url, messages[:1])
        if replay.tool_calls and replay.tool_calls[0].call_id != first_ids[0]:
            problems.append(f"replay: tool call id changed from {first_ids[0]!r} to {replay.tool_calls[0].call_id!r}")
    return problems
