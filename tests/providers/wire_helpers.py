"""Routes to the mock provider for the wire clients' tests, and a helper to read a stream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from agentos.config import NamedProvider, Route
from agentos.config.provider import ProviderKind
from agentos.mock.server import MockServer
from agentos.providers.base import ChatRequest, Completion, Provider, TextDelta
from agentos.providers.wires import client_for

MOCK_API_KEY = "mock-key"
MockFactory = Callable[..., Awaitable[MockServer]]


def route_to(
    mock: MockServer,
    kind: ProviderKind,
    *,
    max_tokens: int = 0,
    api_key: str = MOCK_API_KEY,
    first_token_timeout_s: float = 5.0,
    idle_timeout_s: float = 5.0,
    **params: Any,
) -> Route:
    """A router target of `kind` on `mock`, with `params` as the target's parameters."""
    provider = NamedProvider(
        kind=kind,
        url=mock.url,
        max_retries=0,
        first_token_timeout_s=first_token_timeout_s,
        idle_timeout_s=idle_timeout_s,
    )
    return Route(
        name=f"mock/{kind}",
        provider_name="mock",
        provider=provider,
        model="mock-model",
        params=params,
        max_tokens=max_tokens,
        price=None,
        api_key=api_key,
    )


def wire_client(mock: MockServer, session: aiohttp.ClientSession, kind: ProviderKind, **route: Any) -> Provider:
    """The client `client_for` gives a target of `kind` on `mock` (`route_to`'s arguments)."""
    return client_for(route_to(mock, kind, **route), session)


async def collect(client: Provider, request: ChatRequest) -> tuple[list[str], Completion]:
    """The text deltas of a stream and its completion."""
    deltas: list[str] = []
    completion = None
    async for item in client.stream(request):
        if isinstance(item, TextDelta):
            deltas.append(item.text)
        else:
            completion = item
    assert completion is not None
    return deltas, completion


async def deltas_before_failure(client: Provider, request: ChatRequest) -> tuple[list[str], BaseException]:
    """The text deltas a stream yielded before it raised, and what it raised."""
    deltas: list[str] = []
    try:
        async for item in client.stream(request):
            if isinstance(item, TextDelta):
                deltas.append(item.text)
    except Exception as exc:
        return deltas, exc
    raise AssertionError("the stream did not fail")


def chat(text: str = "hello there", **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], retry=False, **kwargs)


def function_tool(name: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"command": {"type": "array"}}}
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": parameters}}


AGENT_TOOLS = [function_tool("run_command"), function_tool("ask_human")]
