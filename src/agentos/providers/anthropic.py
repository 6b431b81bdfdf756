"""The `anthropic` wire: the native Messages API (`POST {url}/messages`), streamed.

The request is translated from the normalized one (OpenAI chat messages and tools):

- `system` (and `developer`) messages become the top-level `system` blocks, in order;
- a user message's text parts stay text blocks and its `image_url` parts become `image` blocks
  (a `data:` URL as base64, any other URL by reference); any other part is refused;
- an assistant message's `tool_calls` become `tool_use` blocks after its text (parallel calls
  stay one message); `tool` messages become `tool_result` blocks, consecutive ones merged into
  one user message, as the API requires;
- OpenAI `tools` (`{"type": "function", "function": {...}}`) become `{name, description,
  input_schema}`; any other tool type is refused;
- `max_tokens` is required: the request's, else the target's or its provider's, else 4096
  (`agentos.config.provider.routes` resolves that last default, so budgets reserve it too);
- the target's `params` are merged as they are (they are Anthropic's: `temperature`,
  `stop_sequences`, `metadata`, ...), but for `cache_prompt` (ours, see below) and `n` (refused
  above 1: the API answers one message).

Prompt caching: a content part or a tool that carries `cache_control` keeps it; with the target
param `cache_prompt = true` the last system block and the last tool are marked
`cache_control: {"type": "ephemeral"}` too (the stable prefix of an agent's calls), unless they
already carry one.

The stream back: `text_delta`s are the `TextDelta`s; `tool_use` blocks with their
`input_json_delta`s the tool calls; `stop_reason` maps `end_turn`/`stop_sequence` -> `stop`,
`tool_use` -> `tool_calls`, `max_tokens` -> `length`, `refusal` -> `content_filter`. Usage:
`prompt_tokens` = `input_tokens` + cache reads + cache writes. An `error` event before the first
token is a retryable `ProviderHTTPError` (529 for `overloaded_error`, so the router falls back);
after it, a `ProviderProtocolError` (the turn fails: text already sent is never repeated).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.config import Route
from agentos.config.provider import ANTHROPIC_DEFAULT_MAX_TOKENS
from agentos.errors import ProviderProtocolError, ProviderUnsupported
from agentos.providers.base import ChatRequest, Completion, Message, Usage
from agentos.providers.translation import TEXT_PARTS, function_of, merged_params, stream_error, tool_calls
from agentos.providers.transport import WireClient

WIRE = "anthropic"
CACHE_PROMPT = "cache_prompt"  # the target param that marks the system prompt and the last tool
EPHEMERAL = {"type": "ephemeral"}
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
# The HTTP status each error type stands for, so one error event maps as the same answer would.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
_encode = msgspec.json.encode


def request_body(
    request: ChatRequest, model: str, max_tokens: int, target_params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Messages API body for `request` (not encoded); `target_params` go under the
    request's own `params`, and `cache_prompt` among them marks the cached prefix.

    Raises:
        ProviderUnsupported: a content part, a tool or `n > 1`, which the Messages API cannot express.
    """
    params = merged_params(request, target_params, WIRE)
    cache_prompt = bool(params.pop(CACHE_PROMPT, False))
    system, messages = translate_messages(request.messages)
    body: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens or max_tokens, "messages": messages}
    tools = [translate_tool(tool) for tool in request.tools or ()]
    if cache_prompt:
        _mark_last(system)
        _mark_last(tools)
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    body.update(params)
    body["stream"] = True
    return body


def _mark_last(blocks: list[dict[str, Any]]) -> None:
    if blocks and "cache_control" not in blocks[-1]:
        blocks[-1]["cache_control"] = EPHEMERAL


def translate_messages(messages: list[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) for OpenAI chat `messages`.

    Raises:
        ProviderUnsupported: a message role or content part the Messages API cannot express.
    """
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            system += _text_blocks(message.get("content"))
        elif role == "user":
            _append(out, "user", _user_blocks(message.get("content")))
        elif role == "assistant":
            _append(out, "assistant", _assistant_blocks(message))
        elif role == "tool":
            _append(out, "user", [_tool_result(message)], merge=True)
        else:
            raise ProviderUnsupported(f"a message of role {role!r}", WIRE)
    return system, out


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]], *, merge: bool = False) -> None:
    """Add a message; a tool result joins the previous user message when that holds tool results."""
    if not blocks:
        return  # an assistant message with neither text nor calls: the API refuses empty content
    last = out[-1] if out else None
    if merge and last is not None and last["role"] == "user" and last["content"][-1]["type"] == "tool_result":
        last["content"].extend(blocks)
        return
    out.append({"role": role, "content": blocks})


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_text_part(part) for part in content]


def _text_part(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") not in TEXT_PARTS:
        raise ProviderUnsupported(f"a content part of type {part.get('type')!r} here", WIRE)
    return _with_cache(part, {"type": "text", "text": part.get("text", "")})


def _with_cache(part: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    if "cache_control" in part:
        block["cache_control"] = part["cache_control"]
    return block


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [_image_block(part) if part.get("type") == "image_url" else _text_part(part) for part in content]
    return _text_blocks(content) or [{"type": "text", "text": ""}]


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url", "") if isinstance(image, dict) else str(image or "")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media_type, _, encoding = head.removeprefix("data:").partition(";")
        if encoding != "base64":
            raise ProviderUnsupported("an image data URL that is not base64", WIRE)
        source = {"type": "base64", "media_type": media_type, "data": data}
    else:
        source = {"type": "url", "url": url}
    return _with_cache(part, {"type": "image", "source": source})


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = _text_blocks(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        try:
            arguments = msgspec.json.decode(function.get("arguments") or "{}")
        except msgspec.DecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise ProviderUnsupported("tool call arguments that are not a JSON object", WIRE)
        blocks.append(
            {"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": arguments}
        )
    return blocks


def _tool_result(message: Message) -> dict[str, Any]:
    content = message.get("content")
    result = content if isinstance(content, str) else _text_blocks(content)
    return {"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""), "content": result}


def translate_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `tools` entry as an Anthropic tool.

    Raises:
        ProviderUnsupported: a tool that is not a function.
    """
    function = function_of(tool, WIRE)
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    out: dict[str, Any] = {"name": function.get("name", ""), "input_schema": schema}
    if function.get("description"):
        out["description"] = function["description"]
    return _with_cache(tool, out)


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(msgspec.Struct):
    usage: _Usage | None = None


class _Block(msgspec.Struct):
    type: str = ""
    id: str = ""
    name: str = ""
    text: str = ""


class _Delta(msgspec.Struct):
    type: str = ""
    text: str = ""
    partial_json: str = ""
    stop_reason: str | None = None


class _Error(msgspec.Struct):
    type: str = "api_error"
    message: str = ""


class _Event(msgspec.Struct):
    type: str
    index: int = 0
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class _Answer:
    """What the events have said so far: text, tool calls by block index, usage, stop reason."""

    __slots__ = ("text", "calls", "usage", "stop_reason", "stopped")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}
        self.usage = _Usage()
        self.stop_reason: str | None = None
        self.stopped = False

    def apply(self, event: _Event) -> str | None:
        """Take in one event: the text it adds, "" for a tool call's arguments, None for no content.

        Raises:
            ProviderError: an `error` event (`translation.stream_error`).
        """
        kind = event.type
        if kind == "content_block_delta" and event.delta is not None:
            if event.delta.type == "text_delta":
                return event.delta.text
            if event.delta.type == "input_json_delta" and event.index in self.calls:
                self.calls[event.index][2] += event.delta.partial_json
                return ""
        elif kind == "content_block_start" and event.content_block is not None:
            block = event.content_block
            if block.type == "tool_use":
                self.calls[event.index] = [block.id, block.name, ""]
            elif block.type == "text" and block.text:
                return block.text
        elif kind == "message_start" and event.message is not None:
            self._count(event.message.usage)
        elif kind == "message_delta":
            self._count(event.usage)
            if event.delta is not None and event.delta.stop_reason is not None:
                self.stop_reason = event.delta.stop_reason
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = event.error or _Error()
            status = ERROR_STATUS.get(error.type, 500)
            raise stream_error(error.type, error.message, status, started=bool(self.text))
        return None

    def _count(self, usage: _Usage | None) -> None:
        """Counts in a later event replace the earlier ones (message_delta's are cumulative)."""
        if usage is None:
            return
        for name in _Usage.__struct_fields__:
            if getattr(usage, name) is not None:
                setattr(self.usage, name, getattr(usage, name))

    def completion(self) -> Completion:
        """Raises: ProviderProtocolError when the stream ended before `message_stop`."""
        if not self.stopped or self.stop_reason is None:
            raise ProviderProtocolError("the stream ended without message_stop")
        u = self.usage
        reads, writes = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        usage = Usage((u.input_tokens or 0) + reads + writes, u.output_tokens or 0, reads, writes)
        finish = STOP_REASONS.get(self.stop_reason, self.stop_reason)
        return Completion("".join(self.text), finish, usage, tool_calls(self.calls))


class AnthropicProvider(WireClient[_Event]):
    """The `anthropic` wire: the Messages API, streamed."""

    path = "/messages"

    def headers(self, route: Route) -> dict[str, str]:
        headers = {"anthropic-version": route.provider.anthropic_version}
        if route.api_key:
            headers["x-api-key"] = route.api_key
        return headers

    def body(self, request: ChatRequest) -> bytes:
        max_tokens = self.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS  # a route built by hand
        return _encode(request_body(request, request.model or self.model, max_tokens, self.params))

    def decode(self, data: str) -> _Event:
        return _decode_event(data)

    def answer(self) -> _Answer:
        return _Answer()
