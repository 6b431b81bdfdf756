"""The built-in mock provider of `agentos serve` when no provider is configured.

`agentos serve` (the CLI) wires it in, so the server itself never imports the bench kit: the
README's first command streams a token with nothing to set up, and a real deployment with
`provider.url` set never starts it, nor imports it (the mock's embeddings load numpy).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec

from agentos.config import Settings

log = logging.getLogger("agentos")


@asynccontextmanager
async def builtin_mock(settings: Settings) -> AsyncIterator[Settings]:
    """`settings` unchanged when a provider is configured; otherwise a mock is started for the
    duration and the settings point at it."""
    if settings.provider.url or settings.providers:
        yield settings
        return
    from agentos.mock.server import MockSettings, start_mock  # only now: it loads numpy (embeddings)

    m = settings.mock
    mock = await start_mock(MockSettings(ttft_ms=m.ttft_ms, tps=m.tps, tokens=m.tokens, scenario=m.scenario))
    log.warning(
        "no provider configured (--provider-url): using the built-in mock provider at %s (scenario %r)",
        mock.url,
        m.scenario,
    )
    try:
        yield msgspec.structs.replace(settings, provider=msgspec.structs.replace(settings.provider, url=mock.url))
    finally:
        await mock.close()
