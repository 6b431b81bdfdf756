"""The `openai-responses` wire: OpenAI's Responses API (`POST {url}/responses`), streamed.

The request is translated from the normalized one (OpenAI chat messages and tools):

- the leading `system` (and `developer`) messages become `instructions`; a later one stays an
  input message of its role, where it was;
- user and assistant messages become input messages (text parts `input_text`, `image_url`
  parts `input_image`; any other part is refused); an assistant's `tool_calls` become
  `function_call` items after its text, and `tool` messages `function_call_output` items;
- OpenAI `tools` become top-level function tools (`{"type": "function", "name", "description",
  "parameters", "strict"}`, `strict` false unless the tool says otherwise, as in chat
  completions); any other tool type is refused;
- `max_tokens` becomes `max_output_tokens`; `store` is false (the whole history is sent each
  time, so nothing needs keeping upstream); the target's `params` are merged as they are, but
  `n` above 1 is refused (a response has one output).

Prompt caching is the provider's own on this wire: `cache_control` marks are not sent, and
`input_tokens_details.cached_tokens` comes back as `cache_read_tokens`.

The stream back: `response.output_text.delta` is the text; `response.output_item.added` of a
`function_call`, its `response.function_call_arguments.delta`s and `.done` the tool calls;
`response.completed` the usage and `stop` (or `tool_calls` when it called any);
`response.incomplete` `length` for `max_output_tokens` (`content_filter` for that reason).
`response.failed` or an `error` event before the first token is the `ProviderHTTPError` its code
stands for (retryable for `server_error` and `rate_limit_exceeded`); after it, a
`ProviderProtocolError`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.config import Route
from agentos.errors import ProviderError, ProviderProtocolError, ProviderUnsupported
from agentos.providers.base import ChatRequest, Completion, Message, Usage
from agentos.providers.translation import TEXT_PARTS, function_of, merged_params, stream_error, tool_calls
from agentos.providers.transport import WireClient

WIRE = "openai-responses"
INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
# The HTTP status a failed response's error code stands for (500 for the ones not listed).
ERROR_STATUS = {"rate_limit_exceeded": 429, "server_error": 500, "invalid_prompt": 400, "invalid_request_error": 400}
_encode = msgspec.json.encode


def request_body(
    request: ChatRequest, model: str, max_tokens: int, target_params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Responses API body for `request` (not encoded), `target_params` merged under the
    request's own `params`.

    Raises:
        ProviderUnsupported: a content part, a tool or `n > 1` that the Responses API cannot express.
    """
    params = merged_params(request, target_params, WIRE)
    instructions, items = translate_messages(request.messages)
    body: dict[str, Any] = {"model": model, "input": items, "store": False}
    if instructions:
        body["instructions"] = instructions
    if request.tools:
        body["tools"] = [translate_tool(tool) for tool in request.tools]
    if request.max_tokens or max_tokens:
        body["max_output_tokens"] = request.max_tokens or max_tokens
    body.update(params)
    body["stream"] = True
    return body


def translate_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(instructions, input items) for OpenAI chat `messages`.

    Raises:
        ProviderUnsupported: a message role or content part the Responses API cannot express.
    """
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = _text(message.get("content"))
            if items:
                items.append({"role": role, "content": text})
            else:
                instructions.append(text)
        elif role == "user":
            items.append({"role": "user", "content": _user_content(message.get("content"))})
        elif role == "assistant":
            items += _assistant_items(message)
        elif role == "tool":
            output = _text(message.get("content"))
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id", ""), "output": output})
        else:
            raise ProviderUnsupported(f"a message of role {role!r}", WIRE)
    return "\n\n".join(instructions), items


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for part in content:
        if part.get("type") not in TEXT_PARTS:
            raise ProviderUnsupported(f"a content part of type {part.get('type')!r} here", WIRE)
    return "".join(str(part.get("text", "")) for part in content)


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if not isinstance(content, list):
        return content or ""
    return [_input_part(part) for part in content]


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in TEXT_PARTS:
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        url, detail = (
            (image.get("url", ""), image.get("detail", "auto")) if isinstance(image, dict) else (image, "auto")
        )
        return {"type": "input_image", "image_url": url, "detail": detail}
    raise ProviderUnsupported(f"a content part of type {kind!r}", WIRE)


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    text = _text(message.get("content"))
    items: list[dict[str, Any]] = [{"role": "assistant", "content": text}] if text else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id", ""),
                "name": function.get("name", ""),
                "arguments": function.get("arguments") or "{}",
            }
        )
    return items


def translate_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat `tools` entry as a Responses API function tool.

    Raises:
        ProviderUnsupported: a tool that is not a function.
    """
    function = function_of(tool, WIRE)
    out: dict[str, Any] = {
        "type": "function",
        "name": function.get("name", ""),
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        "strict": bool(function.get("strict", False)),
    }
    if function.get("description"):
        out["description"] = function["description"]
    return out


class _Item(msgspec.Struct):
    """An output item; only a function call's fields are read (a message's text comes in deltas)."""

    type: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class _InputDetails(msgspec.Struct):
    cached_tokens: int = 0


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    input_tokens_details: _InputDetails | None = None


class _Error(msgspec.Struct):
    code: str | None = None
    message: str = ""


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _Response(msgspec.Struct):
    usage: _Usage | None = None
    error: _Error | None = None
    incomplete_details: _Incomplete | None = None


class _Event(msgspec.Struct):
    type: str
    delta: str = ""
    output_index: int = 0
    item: _Item | None = None
    arguments: str | None = None
    response: _Response | None = None
    code: str | None = None  # an `error` event's
    message: str = ""


_decode_event = msgspec.json.Decoder(_Event).decode


class _Answer:
    """What the events have said so far: text, function calls by output index, the end."""

    __slots__ = ("text", "calls", "usage", "finish")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}
        self.usage: _Usage | None = None
        self.finish: str | None = None

    def apply(self, event: _Event) -> str | None:
        """Take in one event: the text it adds, "" for a call's arguments, None for no content.

        Raises:
            ProviderError: `response.failed` or `error` (`translation.stream_error`).
        """
        kind = event.type
        if kind == "response.output_text.delta":
            return event.delta
        if kind == "response.function_call_arguments.delta" and event.output_index in self.calls:
            self.calls[event.output_index][2] += event.delta
            return ""
        if kind in ("response.output_item.added", "response.output_item.done"):
            self._item(event.output_index, event.item)
        elif kind == "response.function_call_arguments.done" and event.output_index in self.calls:
            self.calls[event.output_index][2] = event.arguments or self.calls[event.output_index][2]
        elif kind == "response.completed" and event.response is not None:
            self.usage = event.response.usage
            self.finish = "tool_calls" if self.calls else "stop"
        elif kind == "response.incomplete" and event.response is not None:
            self.usage = event.response.usage
            reason = (event.response.incomplete_details or _Incomplete()).reason or "max_output_tokens"
            self.finish = INCOMPLETE_REASONS.get(reason, "length")
        elif kind == "response.failed":
            error = (event.response.error if event.response is not None else None) or _Error(code="server_error")
            raise self._failed(error)
        elif kind == "error":
            raise self._failed(_Error(event.code, event.message))
        return None

    def _failed(self, error: _Error) -> ProviderError:
        code = error.code or "server_error"
        return stream_error(code, error.message, ERROR_STATUS.get(code, 500), started=bool(self.text))

    def _item(self, index: int, item: _Item | None) -> None:
        if item is None or item.type != "function_call":
            return
        call = self.calls.setdefault(index, ["", "", ""])
        call[0], call[1] = item.call_id or call[0], item.name or call[1]
        call[2] = item.arguments or call[2]

    def completion(self) -> Completion:
        """Raises: ProviderProtocolError when the stream ended before the response did."""
        if self.finish is None:
            raise ProviderProtocolError("the stream ended without response.completed")
        u = self.usage or _Usage()
        cached = u.input_tokens_details.cached_tokens if u.input_tokens_details is not None else 0
        usage = Usage(u.input_tokens, u.output_tokens, cached)
        return Completion("".join(self.text), self.finish, usage, tool_calls(self.calls))


class OpenAIResponsesProvider(WireClient[_Event]):
    """The `openai-responses` wire: the Responses API, streamed."""

    path = "/responses"

    def headers(self, route: Route) -> dict[str, str]:
        return {"Authorization": f"Bearer {route.api_key}"} if route.api_key else {}

    def body(self, request: ChatRequest) -> bytes:
        return _encode(request_body(request, request.model or self.model, self.max_tokens, self.params))

    def decode(self, data: str) -> _Event:
        return _decode_event(data)

    def answer(self) -> _Answer:
        return _Answer()
