"""Pure encoders for Anthropic's Messages API, as the mock provider speaks it (`POST
/v1/messages`, streamed), and the reading of its requests into the chat messages the answer
scripts (`agentos.mock.scenario`) take.

The stream is the real service's: `message_start` (usage with input and cache tokens), `ping`,
then per content block `content_block_start` / `content_block_delta` (`text_delta` or
`input_json_delta`) / `content_block_stop`, then `message_delta` (`stop_reason`, output tokens)
and `message_stop`. Errors are `{"type": "error", "error": {"type", "message"}}`, as an HTTP
answer (529 for `overloaded_error`) or as an `error` event inside the stream.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.mock.scenario import AnswerPlan, split_arguments
from agentos.mock.wire import Asked, Ending, text_pieces

_encode = msgspec.json.Encoder().encode
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "stop_sequence": "stop_sequence"}


def event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _encode({"type": kind, **data}) + b"\n\n"


def error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def read_request(body: dict[str, Any]) -> Asked:
    """What a Messages API request asks, with its messages in chat form: tool results become
    `tool` messages (the scripts count them), the system prompt a `system` message."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    messages.append(
                        {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": block.get("content")}
                    )
            rest = [b for b in content if isinstance(b, dict) and b.get("type") != "tool_result"]
            if rest:
                messages.append({"role": "user", "content": rest})
        else:
            messages.append({"role": message.get("role"), "content": content})
    tools = frozenset(str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict))
    stops = body.get("stop_sequences")
    return Asked(
        messages=messages,
        tools=tools,
        max_tokens=_positive(body.get("max_tokens")),
        stream=bool(body.get("stream")),
        model=str(body.get("model") or ""),
        stop=str(stops[0]) if isinstance(stops, list) and stops else None,
        cache_prefix=_cache_prefix(body),
    )


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _cache_prefix(body: dict[str, Any]) -> tuple[bytes, int] | None:
    """The prompt up to its last `cache_control` mark (tools, then system, then messages, as the
    API orders them), as bytes to remember and the words of text in it; None without a mark."""
    blocks: list[dict[str, Any]] = [t for t in body.get("tools") or () if isinstance(t, dict)]
    system = body.get("system")
    if isinstance(system, list):
        blocks += [b for b in system if isinstance(b, dict)]
    elif isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            blocks += [b for b in content if isinstance(b, dict)]
        elif isinstance(content, str):
            blocks.append({"type": "text", "text": content})
    marks = [i for i, b in enumerate(blocks) if "cache_control" in b]
    if not marks:
        return None
    prefix = blocks[: marks[-1] + 1]
    words = sum(len(str(b.get("text", "")).split()) for b in prefix)
    return _encode(prefix), words


class MessageWriter:
    """Builds the events of one streamed message."""

    def __init__(self, message_id: str, model: str) -> None:
        self._message_id = message_id
        self._model = model
        self._open_block = False
        self._opening = Ending(finish="stop", input_tokens=0, completion_tokens=0)

    def _message(self, ending: Ending, content: list[dict[str, Any]], *, done: bool) -> dict[str, Any]:
        """The `message` object: as `message_start` opens it (no content, no stop reason, one
        output token so far), or `done`, as a whole answer."""
        usage = {
            "input_tokens": ending.input_tokens,
            "cache_creation_input_tokens": ending.cache_write,
            "cache_read_input_tokens": ending.cache_read,
            "output_tokens": ending.completion_tokens if done else 1,
        }
        return {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": STOP_REASONS[ending.finish] if done else None,
            "stop_sequence": ending.stop_sequence if done else None,
            "usage": usage,
        }

    def _start(self, ending: Ending) -> bytes:
        return event("message_start", {"message": self._message(ending, [], done=False)}) + event("ping", {})

    def whole(self, plan: AnswerPlan, ending: Ending) -> dict[str, Any]:
        """The answer as one `message` (a request without `stream`)."""
        if plan.calls:
            content = [
                {"type": "tool_use", "id": c.call_id, "name": c.name, "input": msgspec.json.decode(c.arguments)}
                for c in plan.calls
            ]
        else:
            content = [{"type": "text", "text": "".join(text_pieces(plan))}]
        return self._message(ending, content, done=True)

    def frames(self, plan: AnswerPlan, opening: Ending) -> list[bytes]:
        """The content's frames, the first led by `message_start` (with `opening`'s usage)."""
        self._opening = opening
        frames = self._tool_frames(plan) if plan.calls else self._text_frames(plan)
        frames[0] = self._start(opening) + frames[0]
        return frames

    def _text_frames(self, plan: AnswerPlan) -> list[bytes]:
        self._open_block = True
        pieces = text_pieces(plan)
        start = event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        deltas = [
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}}) for p in pieces
        ]
        deltas[0] = start + deltas[0]
        return deltas

    def _tool_frames(self, plan: AnswerPlan) -> list[bytes]:
        frames = []
        for index, call in enumerate(plan.calls):
            block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}
            frames.append(event("content_block_start", {"index": index, "content_block": block}))
            for piece in split_arguments(call.arguments):
                delta = {"type": "input_json_delta", "partial_json": piece}
                frames.append(event("content_block_delta", {"index": index, "delta": delta}))
            frames.append(event("content_block_stop", {"index": index}))
        return frames

    def closing(self, ending: Ending) -> bytes:
        stop = event("content_block_stop", {"index": 0}) if self._open_block else b""
        delta = {"stop_reason": STOP_REASONS[ending.finish], "stop_sequence": ending.stop_sequence}
        usage = {"output_tokens": ending.completion_tokens}
        return stop + event("message_delta", {"delta": delta, "usage": usage}) + event("message_stop", {})

    def failure(self, sent: int) -> bytes:
        """An `error` event (overloaded), after `message_start` as the service sends it."""
        start = self._start(self._opening) if sent == 0 else b""
        return start + event("error", error_body("overloaded_error", "mock: injected overload in the stream"))
