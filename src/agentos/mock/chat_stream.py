"""Pure accumulation of a streamed OpenAI chat completion (chunks in, one answer out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

DONE_DATA = "[DONE]"


@dataclass(slots=True)
class ToolCallParts:
    call_id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class ChatAnswer:
    text: str = ""
    tool_calls: dict[int, ToolCallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False  # `data: [DONE]` seen
    chunks: int = 0


def add_chunk(answer: ChatAnswer, data: str) -> bool:
    """Fold one SSE `data:` payload into `answer`; True when it carried content (text or tool call)."""
    if data == DONE_DATA:
        answer.done = True
        return False
    chunk = msgspec.json.decode(data)
    answer.chunks += 1
    if chunk.get("usage"):
        answer.usage = chunk["usage"]
    carried = False
    for choice in chunk.get("choices") or ():
        carried = _add_delta(answer, choice.get("delta") or {}) or carried
        if choice.get("finish_reason"):
            answer.finish_reason = choice["finish_reason"]
    return carried


def _add_delta(answer: ChatAnswer, delta: dict[str, Any]) -> bool:
    carried = False
    if delta.get("content"):
        answer.text += delta["content"]
        carried = True
    for part in delta.get("tool_calls") or ():
        call = answer.tool_calls.setdefault(int(part.get("index", 0)), ToolCallParts())
        call.call_id = part.get("id") or call.call_id
        function = part.get("function") or {}
        call.name = function.get("name") or call.name
        call.arguments += function.get("arguments") or ""
        carried = True
    return carried
