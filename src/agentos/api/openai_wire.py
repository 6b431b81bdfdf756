"""The OpenAI wire format, pure: request bodies, the objects answered, the streamed lines.

Nothing here does I/O: the routes (`agentos.api.openai_chat`, `agentos.api.openai_responses`)
read a body into these structs, run a turn, and write what these functions build. The shapes
follow OpenAI's API reference exactly where a client reads them (the `openai` SDK's stream
helpers dereference every `tool_calls` entry's integer `index`; a usage-only chunk has
`choices: []`, never null; a Chat Completions stream ends with `data: [DONE]`, even after an
error).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from agentos.kernel import OnBusy

_encode = msgspec.json.encode

DONE = b"data: [DONE]\n\n"

# OpenAI's error `type` by status; the SDKs pick their exception class by status alone.
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}


class TextPart(msgspec.Struct, forbid_unknown_fields=False):
    """A content part; only text parts (`text`, `input_text`, `output_text`) are understood."""

    type: str
    text: str | None = None


Content = str | list[TextPart] | None


class ChatMessage(msgspec.Struct, forbid_unknown_fields=False):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class StreamOptions(msgspec.Struct, forbid_unknown_fields=False):
    include_usage: bool = False


class ChatCompletionCreate(msgspec.Struct, forbid_unknown_fields=False):
    """What `POST /v1/chat/completions` reads; sampling fields (temperature, ...) are accepted
    and ignored: the agent's configuration decides them."""

    model: str
    # Both checked by the handler, with OpenAI's error (`InvalidParam`), not on decoding.
    messages: Annotated[list[ChatMessage], msgspec.Meta(extra_json_schema={"minItems": 1})]
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    n: Annotated[int, msgspec.Meta(extra_json_schema={"minimum": 1, "maximum": 1})] = 1
    user: str | None = None
    # An Agent OS extension: what the turn does if its session (the session header) runs one.
    on_busy: Annotated[
        OnBusy | None,
        msgspec.Meta(description="Agent OS extension: as `on_busy` of a turn (docs/conversations.md)"),
    ] = None


class ResponseCreate(msgspec.Struct, forbid_unknown_fields=False):
    """What `POST /v1/responses` reads: `input` text, or a list of message items."""

    model: str
    input: str | list[ChatMessage]
    previous_response_id: str | None = None
    instructions: str | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    conversation: Any = None  # refused when given: a continuation is `previous_response_id`
    background: bool = False  # refused when true


def text_of(content: Content) -> str | None:
    """The text of a message's content; None when a part is not text (an image, a file)."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = [part.text for part in content if part.type in ("text", "input_text", "output_text")]
    if len(texts) != len(content) or any(t is None for t in texts):
        return None
    return "".join(t for t in texts if t is not None)


def error_body(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: `{"error": {"message", "type", "param", "code"}}`."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def model_entry(model_id: str, created_s: int, owned_by: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created_s, "owned_by": owned_by}


def usage_of(data: dict[str, Any]) -> dict[str, int]:
    """Chat Completions usage from a `turn.completed` event (an agent turn reports none: zeros)."""
    given = data.get("usage")
    usage: dict[str, Any] = given if isinstance(given, dict) else {}
    prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def tool_calls_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The `tool_calls` of a completed turn (a client's own tools), each with its `index`."""
    calls = data.get("tool_calls") or []
    return [
        {"index": i, "id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for i, c in enumerate(calls)
    ]


def finish_reason_of(data: dict[str, Any]) -> str:
    if data.get("tool_calls"):
        return "tool_calls"
    reason = data.get("finish_reason")
    return reason if reason in ("stop", "length", "content_filter") else "stop"


class ChunkWriter:
    """Builds the `data:` lines of one streamed chat completion; the same `id` and `created`
    on every chunk, `usage: null` on each when the client asked for a usage chunk."""

    __slots__ = ("_head", "_usage")

    def __init__(self, completion_id: str, created_s: int, model: str, include_usage: bool) -> None:
        self._head = {"id": completion_id, "object": "chat.completion.chunk", "created": created_s, "model": model}
        self._usage = include_usage

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._line({**self._head, "choices": [choice]} | ({"usage": None} if self._usage else {}))

    def end(self, data: dict[str, Any]) -> bytes:
        """The end of a completed turn: its tool calls, the finish reason, usage if asked, [DONE]."""
        lines = []
        if calls := tool_calls_of(data):
            lines.append(self.chunk({"tool_calls": calls}))
        lines.append(self.chunk({}, finish_reason_of(data)))
        if self._usage:
            lines.append(self._line({**self._head, "choices": [], "usage": usage_of(data)}))
        return b"".join([*lines, DONE])

    def _line(self, obj: dict[str, Any]) -> bytes:
        return b"".join((b"data: ", _encode(obj), b"\n\n"))


def error_line(body: dict[str, Any]) -> bytes:
    """An error after the stream started: one `data:` line with the error object, then [DONE]."""
    return b"".join((b"data: ", _encode(body), b"\n\n", DONE))


def completion(completion_id: str, created_s: int, model: str, text: str, data: dict[str, Any]) -> dict[str, Any]:
    """A whole `chat.completion` object of a completed turn."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls := tool_calls_of(data):
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason_of(data)}
    head = {"id": completion_id, "object": "chat.completion", "created": created_s, "model": model}
    return {**head, "choices": [choice], "usage": usage_of(data)}
