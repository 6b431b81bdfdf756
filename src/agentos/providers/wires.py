"""One client per router target, by its provider's kind (its wire).

Every client is a `Provider` (`agentos.providers.base`): it takes the normalized `ChatRequest`
(OpenAI chat messages and tools, `model` set to the target's upstream name, `params` and
`max_tokens` from the target) and yields the normalized stream. Clients of one provider share
one aiohttp session, so its connections are pooled once.
"""

from __future__ import annotations

import aiohttp

from agentos.config import Route
from agentos.providers.anthropic import AnthropicProvider
from agentos.providers.base import Provider
from agentos.providers.openai_compat import OpenAICompatProvider
from agentos.providers.openai_responses import OpenAIResponsesProvider
from agentos.providers.transport import new_client_session


def client_for(route: Route, session: aiohttp.ClientSession) -> Provider:
    """The wire client for `route`, on `session` (which the caller owns and closes)."""
    kind = route.provider.kind
    if kind == "anthropic":
        return AnthropicProvider.for_route(route, session)
    if kind == "openai-responses":
        return OpenAIResponsesProvider.for_route(route, session)
    return OpenAICompatProvider.for_route(route, session)  # "openai": the config allows no other kind


def session_for(route: Route) -> aiohttp.ClientSession:
    """A client session with the connect timeout of `route`'s provider."""
    return new_client_session(route.provider)
