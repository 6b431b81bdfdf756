"""Pure answer scripts of the mock provider: what a request gets back, with no I/O.

The `tools` scenario is a contract shared with agent runs (keep it exactly). From the request's
messages, k = the number of `tool` messages after the last `user` message decides the step:

    k = 0  -> tool call `run_command` {"command": ["sh", "-c", "echo step-1 >> effects.log; echo one"]}
    k = 1  -> tool call `run_command` {"command": ["sh", "-c", "echo step-2 >> effects.log; echo two"]}
    k = 2  -> tool call `ask_human`   {"question": "Proceed with the final answer?"}
    k >= 3 -> a final text answer, streamed like `plain`

Tool call ids derive from k and a hash of the last user message, so a replayed request gets the
same ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Scenario = Literal["plain", "tools"]
TOKEN_TEXT = "tok "

_TOOL_STEPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("run_command", {"command": ["sh", "-c", "echo step-1 >> effects.log; echo one"]}),
    ("run_command", {"command": ["sh", "-c", "echo step-2 >> effects.log; echo two"]}),
    ("ask_human", {"question": "Proceed with the final answer?"}),
)
TOOL_STEP_COUNT = len(_TOOL_STEPS)


@dataclass(frozen=True, slots=True)
class ToolCallPlan:
    call_id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True, slots=True)
class AnswerPlan:
    """What to send back: either `tokens` text tokens or one tool call."""

    tokens: int
    tool_call: ToolCallPlan | None = None


def tool_messages_since_user(messages: Sequence[dict[str, Any]]) -> int:
    """k: the number of `tool` messages after the last `user` message."""
    k = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            break
        if role == "tool":
            k += 1
    return k


def last_user_text(messages: Sequence[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def prompt_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """A rough count: the words in every message's text."""
    return sum(len(message_text(m).split()) for m in messages if isinstance(m, dict))


def tool_call_id(k: int, user_text: str) -> str:
    digest = hashlib.sha256(user_text.encode()).hexdigest()[:16]
    return f"call_{k}_{digest}"


def plan_answer(scenario: Scenario, messages: Sequence[dict[str, Any]], tokens: int) -> AnswerPlan:
    if scenario == "plain":
        return AnswerPlan(tokens=tokens)
    k = tool_messages_since_user(messages)
    if k >= TOOL_STEP_COUNT:
        return AnswerPlan(tokens=tokens)
    name, arguments = _TOOL_STEPS[k]
    call = ToolCallPlan(tool_call_id(k, last_user_text(messages)), name, msgspec.json.encode(arguments).decode())
    return AnswerPlan(tokens=tokens, tool_call=call)


def split_arguments(arguments: str, pieces: int = 3) -> list[str]:
    """Split JSON text into about `pieces` parts, as real providers stream arguments."""
    size = max(1, -(-len(arguments) // pieces))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def expected_tool_steps() -> tuple[tuple[str, dict[str, Any]], ...]:
    """The scripted tool calls, in order (for the contract check)."""
    return _TOOL_STEPS
