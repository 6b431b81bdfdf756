"""Pure answer scripts of the mock provider: what a request gets back, with no I/O.

The `tools` scenario is a contract shared with agent runs (keep it exactly). A request that
offers no tools (a chat turn) is answered with text, as in `plain`. Otherwise, from the request's
messages, k = the number of `tool` messages after the last `user` message decides the step:

    k = 0  -> tool call `run_command` {"command": ["sh", "-c", "echo step-1 >> effects.log; echo one"]}
    k = 1  -> tool call `run_command` {"command": ["sh", "-c", "echo step-2 >> effects.log; echo two"]}
    k = 2  -> tool call `ask_human`   {"question": "Proceed with the final answer?"}
    k >= 3 -> a final text answer, streamed like `plain`

`light` and `heavy` (the run campaigns, `SCRIPTS`) follow the same rule with other steps:
`light` is the two `run_command` calls, then the answer; `heavy` a `run_command` of 10 s,
`ask_human`, another `run_command` of 10 s, then the answer.

`parallel` asks for both of `light`'s calls at once (parallel tool calls, one assistant
message): at k = 0 the two calls, at k >= 2 the answer.

Tool call ids derive from k and a hash of the last user message, so a replayed request gets the
same ids.

A request that offers `search_knowledge` (an agent with knowledge collections) gets a script of
its own instead:

    k = 0  -> tool call `search_knowledge` {"query": <the last user message>}
    k >= 1 -> a final text answer quoting the first excerpt of the last tool result
              ("According to [1] <collection>/<document> ...: <text>"), or saying it found none
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Scenario = Literal["plain", "tools", "light", "heavy", "parallel"]
TOKEN_TEXT = "tok "
Steps = tuple[tuple[str, dict[str, Any]], ...]

_TOOL_STEPS: Steps = (
    ("run_command", {"command": ["sh", "-c", "echo step-1 >> effects.log; echo one"]}),
    ("run_command", {"command": ["sh", "-c", "echo step-2 >> effects.log; echo two"]}),
    ("ask_human", {"question": "Proceed with the final answer?"}),
)
TOOL_STEP_COUNT = len(_TOOL_STEPS)
# The run campaigns' scripts (`agentos bench runs --campaign`): `light` is two quick commands and
# the answer; `heavy` two commands of 10 s with a human question between them, then the answer.
SCRIPTS: dict[str, Steps] = {
    "tools": _TOOL_STEPS,
    "light": _TOOL_STEPS[:2],
    "heavy": (
        ("run_command", {"command": ["sh", "-c", "echo step-1 >> effects.log; sleep 10; echo one"]}),
        ("ask_human", {"question": "Go on with the second command?"}),
        ("run_command", {"command": ["sh", "-c", "echo step-2 >> effects.log; sleep 10; echo two"]}),
    ),
}


@dataclass(frozen=True, slots=True)
class ToolCallPlan:
    call_id: str
    name: str
    arguments: str  # JSON text


SEARCH_KNOWLEDGE = "search_knowledge"
_QUOTE_CHARS = 300  # of the first excerpt, in the knowledge script's answer


@dataclass(frozen=True, slots=True)
class AnswerPlan:
    """What to send back: `tokens` text tokens (or `text`, when set, as the answer), or tool
    calls: `tool_call`, and `more_calls` asked for with it (parallel calls)."""

    tokens: int
    tool_call: ToolCallPlan | None = None
    text: str | None = None
    more_calls: tuple[ToolCallPlan, ...] = ()

    @property
    def calls(self) -> tuple[ToolCallPlan, ...]:
        return () if self.tool_call is None else (self.tool_call, *self.more_calls)


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


def offered_tools(body: dict[str, Any]) -> frozenset[str]:
    """The function names in a request's `tools`."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return frozenset()
    functions = (t.get("function") for t in tools if isinstance(t, dict))
    return frozenset(str(f.get("name")) for f in functions if isinstance(f, dict))


def plan_answer(
    scenario: Scenario, messages: Sequence[dict[str, Any]], tokens: int, tools: frozenset[str] = frozenset()
) -> AnswerPlan:
    if scenario == "plain" or not tools:  # a chat turn offers no tools: it can only be answered
        return AnswerPlan(tokens=tokens)
    if SEARCH_KNOWLEDGE in tools:
        return _plan_knowledge(messages, tokens)
    k = tool_messages_since_user(messages)
    if scenario == "parallel":
        return _plan_parallel(k, last_user_text(messages), tokens)
    steps = SCRIPTS[scenario]
    if k >= len(steps):
        return AnswerPlan(tokens=tokens)
    name, arguments = steps[k]
    call = ToolCallPlan(tool_call_id(k, last_user_text(messages)), name, msgspec.json.encode(arguments).decode())
    return AnswerPlan(tokens=tokens, tool_call=call)


def _plan_parallel(k: int, user_text: str, tokens: int) -> AnswerPlan:
    if k > 0:
        return AnswerPlan(tokens=tokens)
    first, *more = (
        ToolCallPlan(tool_call_id(i, user_text), name, msgspec.json.encode(arguments).decode())
        for i, (name, arguments) in enumerate(SCRIPTS["light"])
    )
    return AnswerPlan(tokens=tokens, tool_call=first, more_calls=tuple(more))


def _plan_knowledge(messages: Sequence[dict[str, Any]], tokens: int) -> AnswerPlan:
    k = tool_messages_since_user(messages)
    question = last_user_text(messages)
    if k == 0:
        arguments = msgspec.json.encode({"query": question}).decode()
        return AnswerPlan(tokens=tokens, tool_call=ToolCallPlan(tool_call_id(0, question), SEARCH_KNOWLEDGE, arguments))
    return AnswerPlan(tokens=tokens, text=quote_first_citation(message_text(messages[-1])))


def quote_first_citation(result: str) -> str:
    """The knowledge script's answer: the first `[1] ...` excerpt of a tool result, quoted."""
    first = next((line for line in result.splitlines() if line.startswith("[1] ")), None)
    if first is None:
        return f"I found nothing to cite. ({result[:_QUOTE_CHARS]})"
    return f"According to {first[:_QUOTE_CHARS]}"


def split_arguments(arguments: str, pieces: int = 3) -> list[str]:
    """Split JSON text into about `pieces` parts, as real providers stream arguments."""
    size = max(1, -(-len(arguments) // pieces))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def expected_tool_steps(scenario: str = "tools") -> Steps:
    """The scripted tool calls of a scenario, in order (for the contract check)."""
    return SCRIPTS[scenario]
