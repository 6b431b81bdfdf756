"""Pure encoders for the OpenAI chat-completions wire format, as the mock provider sends it."""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

import msgspec

from agentos.bench.mock.scenario import TOKEN_TEXT, AnswerPlan, split_arguments

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.Encoder().encode


def sse_data(obj: Any) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


def _chunk(completion_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class ChunkWriter:
    """Builds the SSE frames of one streamed completion."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self._head = (completion_id, created, model)
        self._tokens: dict[bool, bytes] = {}  # every token frame of a stream is the same: encode once

    def frame(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_data(_chunk(*self._head, delta, finish))

    def token(self, first: bool) -> bytes:
        if first not in self._tokens:
            delta: dict[str, Any] = {"role": "assistant", "content": TOKEN_TEXT} if first else {"content": TOKEN_TEXT}
            self._tokens[first] = self.frame(delta)
        return self._tokens[first]

    def tool_call_frames(self, plan: AnswerPlan) -> list[bytes]:
        call = plan.tool_call
        assert call is not None
        head = {"index": 0, "id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        frames = [self.frame({"role": "assistant", "content": None, "tool_calls": [head]})]
        for piece in split_arguments(call.arguments):
            frames.append(self.frame({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        return frames

    def final(self, finish: str, usage: dict[str, int]) -> bytes:
        chunk = _chunk(*self._head, {}, finish)
        chunk["usage"] = usage
        return sse_data(chunk)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(completion_id: str, created: int, model: str, plan: AnswerPlan, prompt: int) -> dict[str, Any]:
    """A whole (non-streamed) chat.completion."""
    message: dict[str, Any] = {"role": "assistant", "content": TOKEN_TEXT * plan.tokens}
    finish = "stop"
    if plan.tool_call is not None:
        call = plan.tool_call
        function = {"name": call.name, "arguments": call.arguments}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.call_id, "type": "function", "function": function}],
        }
        finish = "tool_calls"
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage(prompt, plan.tokens),
    }


def embedding(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector from a hash of the text."""
    raw = b""
    counter = 0
    while len(raw) < dimensions * 4:
        raw += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    ints = struct.unpack(f"<{dimensions}i", raw[: dimensions * 4])
    values = [i / 2**31 for i in ints]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def embeddings_body(inputs: list[str], model: str, dimensions: int) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": embedding(text, dimensions)} for i, text in enumerate(inputs)
    ]
    words = sum(len(text.split()) for text in inputs)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": words, "total_tokens": words}}
