"""What the `anthropic` and `openai-responses` wire clients share in translating: the target's
and the request's parameters merged (and `n > 1` refused), function tools recognized, tool calls
gathered by position, and a wire's in-stream error mapped by whether the first token was out."""

from __future__ import annotations

from typing import Any

from agentos.errors import ProviderError, ProviderHTTPError, ProviderProtocolError, ProviderUnsupported
from agentos.providers.base import ChatRequest, ToolCall

TEXT_PARTS = ("text", "input_text", "output_text")  # content part types that are plain text


def merged_params(request: ChatRequest, target_params: dict[str, Any] | None, wire: str) -> dict[str, Any]:
    """The target's parameters under the request's own, without `n`.

    Raises:
        ProviderUnsupported: `n` above 1 (these wires answer one choice).
    """
    params = {**(target_params or {}), **(request.params or {})}
    if params.pop("n", 1) != 1:
        raise ProviderUnsupported("n > 1 (several choices)", wire)
    return params


def function_of(tool: dict[str, Any], wire: str) -> dict[str, Any]:
    """The `function` of an OpenAI `tools` entry.

    Raises:
        ProviderUnsupported: a tool that is not a function (a built-in tool of another API).
    """
    if tool.get("type") != "function":
        raise ProviderUnsupported(f"a tool of type {tool.get('type')!r}", wire)
    function: dict[str, Any] = tool.get("function") or {}
    return function


def tool_calls(calls: dict[int, list[str]]) -> tuple[ToolCall, ...]:
    """`[call_id, name, arguments]` by block or output position, in order; no arguments is `{}`."""
    return tuple(ToolCall(c[0], c[1], c[2] or "{}") for _, c in sorted(calls.items()))


def stream_error(kind: str, message: str, status: int, *, started: bool) -> ProviderError:
    """An error the provider reported inside the stream. Before the first token it is the error
    its HTTP status would be (retryable for 429 and 5xx: the router falls back, as for a refused
    request); after it, a protocol error that ends the call (text already sent is never repeated).
    """
    text = f"provider stream error {kind}: {message}"[:300]
    return ProviderProtocolError(text) if started else ProviderHTTPError(status, text)
