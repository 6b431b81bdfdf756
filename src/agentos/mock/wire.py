"""Pure encoders for the OpenAI chat-completions wire format, as the mock provider sends it,
and what every wire's request and ending come down to (`Asked`, `Ending`): the other wires'
encoders (`anthropic_wire`, `responses_wire`) read and write through them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgspec

from agentos.mock.scenario import TOKEN_TEXT, AnswerPlan, offered_tools, split_arguments

DONE = b"data: [DONE]\n\n"
Finish = Literal["stop", "tool_calls", "length", "stop_sequence"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Asked:
    """What a request asks, whatever its wire: its messages in chat form (what the answer
    scripts read), the tools it offers, its token limit and stop sequence."""

    messages: list[dict[str, Any]]
    tools: frozenset[str]
    max_tokens: int | None
    stream: bool
    model: str
    stop: str | None = None
    # The prompt prefix a cache would hold (bytes to remember, words in it); None: none marked.
    cache_prefix: tuple[bytes, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """How an answer ends: its finish (in chat-completion terms) and its usage."""

    finish: Finish
    input_tokens: int  # not read from nor written to the cache
    completion_tokens: int
    cache_read: int = 0
    cache_write: int = 0
    stop_sequence: str | None = None

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_write


def text_pieces(plan: AnswerPlan) -> list[str]:
    """The answer's text as streamed: `plan.tokens` constant tokens, or `plan.text` a word each."""
    if plan.text is None:
        return [TOKEN_TEXT] * plan.tokens
    words = [word + " " for word in plan.text.split(" ")]
    words[-1] = words[-1][:-1]
    return words


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
        return [
            self.frame({"role": "assistant", "content": w} if i == 0 else {"content": w})
            for i, w in enumerate(text_pieces(plan))
        ]

    def tool_call_frames(self, plan: AnswerPlan) -> list[bytes]:
        frames = []
        for index, call in enumerate(plan.calls):
            function = {"name": call.name, "arguments": ""}
            head = {"index": index, "id": call.call_id, "type": "function", "function": function}
            delta: dict[str, Any] = {"tool_calls": [head]}
            frames.append(self.frame({"role": "assistant", "content": None, **delta} if index == 0 else delta))
            for piece in split_arguments(call.arguments):
                frames.append(self.frame({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        return frames

    def frames(self, plan: AnswerPlan, opening: Ending) -> list[bytes]:
        """The content's frames (`StreamWriter`)."""
        del opening  # the usage comes with the last chunk only
        return self.tool_call_frames(plan) if plan.calls else self.text_frames(plan)

    def closing(self, ending: Ending) -> bytes:
        """The last chunk and `[DONE]`, one write: a syscall fewer per stream."""
        return self.final(ending.finish, usage(ending.prompt_tokens, ending.completion_tokens)) + DONE

    def whole(self, plan: AnswerPlan, ending: Ending) -> dict[str, Any]:
        return completion_body(self._head[0], self._head[1], self._head[2], plan, ending.prompt_tokens)

    def failure(self, sent: int) -> bytes:
        """An error in the stream: an `error` chunk, and no finish nor `[DONE]` after it."""
        del sent  # the same whatever went before
        return sse_data({"error": {"message": "mock: injected failure in the stream", "type": "server_error"}})

    def final(self, finish: str, usage: dict[str, int]) -> bytes:
        chunk = _chunk(*self._head, {}, finish)
        chunk["usage"] = usage
        return sse_data(chunk)


class StreamWriter(Protocol):
    """One streamed answer's frames, in a wire's format (`ChunkWriter`, `MessageWriter`,
    `ResponseWriter`)."""

    def frames(self, plan: AnswerPlan, opening: Ending) -> list[bytes]:
        """The content, a frame per token or argument piece, sent at the mock's pace."""

    def closing(self, ending: Ending) -> bytes:
        """What follows the content: the finish and the usage."""

    def failure(self, sent: int) -> bytes:
        """A failure in the stream after `sent` content frames; nothing more is sent after it."""

    def whole(self, plan: AnswerPlan, ending: Ending) -> dict[str, Any]:
        """The same answer whole, as JSON (a request that does not ask for a stream)."""


def read_request(body: dict[str, Any]) -> Asked:
    """What a chat-completions request asks. `model` stays empty: the chunks name the mock's."""
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    return Asked(
        messages=body.get("messages") or [],
        tools=offered_tools(body),
        max_tokens=limit if isinstance(limit, int) and limit > 0 else None,
        stream=bool(body.get("stream")),
        model="",
    )


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code}}


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(completion_id: str, created: int, model: str, plan: AnswerPlan, prompt: int) -> dict[str, Any]:
    """A whole (non-streamed) chat.completion."""
    text = TOKEN_TEXT * plan.tokens if plan.text is None else plan.text
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = "stop"
    if plan.calls:
        calls = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in plan.calls
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    body = _completion("chat.completion", completion_id, created, model, {"message": message, "finish_reason": finish})
    body["usage"] = usage(prompt, plan.tokens)
    return body
