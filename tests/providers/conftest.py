from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """The aiohttp session wire clients share (as the router's clients of one provider do)."""
    async with aiohttp.ClientSession() as session:
        yield session
