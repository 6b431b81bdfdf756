"""Pure encoders for the OpenAI chat-completions wire format, as the mock provider sends it."""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.mock.scenario import TOKEN_TEXT, AnswerPlan, split_arguments

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.Encoder().encode


def sse_data(obj: Any) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


def _completion(kind: str, completion_id: str, created: int, model: str, choice: dict[str, Any]) -> dict[str, Any]:
    """The envelope a `chat.completion` and a `chat.completion.chunk` share, around their one choice."""
    choices = [{"index": 0, **choice}]
    return {"id": completion_id, "object": kind, "created": created, "model": model, "choices": choices}


def _chunk(completion_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return _completion(
        "chat.completion.chunk", completion_id, created, model, {"delta": delta, "finish_reason": finish}
    )


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

    def text_frames(self, plan: AnswerPlan) -> list[bytes]:
        """The answer's frames: `plan.tokens` constant tokens, or `plan.text` a word per frame."""
        if plan.text is None:
            return [self.token(i == 0) for i in range(plan.tokens)]
        words = [word + " " for word in plan.text.split(" ")]
        words[-1] = words[-1][:-1]
        return [
            self.frame({"role": "assistant", "content": w} if i == 0 else {"content": w}) for i, w in enumerate(words)
        ]

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
    text = TOKEN_TEXT * plan.tokens if plan.text is None else plan.text
    message: dict[str, Any] = {"role": "assistant", "content": text}
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
    body = _completion("chat.completion", completion_id, created, model, {"message": message, "finish_reason": finish})
    body["usage"] = usage(prompt, plan.tokens)
    return body
