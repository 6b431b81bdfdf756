"""Scripted providers implementing `agentos.providers.base.Provider` (fakes, not mocks)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable

from agentos.providers.base import ChatRequest, Completion, StreamItem, TextDelta, ToolCall, Usage

STEPS = (
    ("run_command", {"command": ["sh", "-c", "echo step-1 >> effects.log; echo one"]}),
    ("run_command", {"command": ["sh", "-c", "echo step-2 >> effects.log; echo two"]}),
    ("ask_human", {"question": "Proceed with the final answer?"}),
)


def tool_messages_since_user(request: ChatRequest) -> int:
    last_user = max(i for i, m in enumerate(request.messages) if m["role"] == "user")
    return sum(1 for m in request.messages[last_user:] if m["role"] == "tool")


def tools_scenario(request: ChatRequest) -> Completion:
    """The same script as the bench mock's `tools` scenario."""
    k = tool_messages_since_user(request)
    usage = Usage(prompt_tokens=10, completion_tokens=5)
    if k < len(STEPS):
        name, args = STEPS[k]
        call = ToolCall(call_id=f"call_{k}", name=name, arguments=json.dumps(args))
        return Completion(text="", finish_reason="tool_calls", usage=usage, tool_calls=(call,))
    return Completion(text="All done.", finish_reason="stop", usage=usage)


class ScriptedProvider:
    """Answers each request with `script(request)`, streaming its text as two deltas.

    `gate`, when set, is awaited before answering call number `gate_at` (1-based), so a test
    can hold a run inside a model call; `entered` is set when that call starts.
    """

    def __init__(self, script: Callable[[ChatRequest], Completion] = tools_scenario, *, gate_at: int = 0) -> None:
        self.script = script
        self.requests: list[ChatRequest] = []
        self.gate_at = gate_at
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        self.requests.append(request)
        if len(self.requests) == self.gate_at:
            self.entered.set()
            await self.gate.wait()
        completion = self.script(request)
        if completion.text:
            half = len(completion.text) // 2
            yield TextDelta(completion.text[:half])
            yield TextDelta(completion.text[half:])
        yield completion

    async def aclose(self) -> None:
        return None


def call(name: str, args: dict[str, object], call_id: str = "c1") -> Completion:
    return Completion(
        text="",
        finish_reason="tool_calls",
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        tool_calls=(ToolCall(call_id=call_id, name=name, arguments=json.dumps(args)),),
    )


def answer(text: str = "done") -> Completion:
    return Completion(text=text, finish_reason="stop", usage=Usage(prompt_tokens=10, completion_tokens=5))
