"""What a caller must pass before new work starts, and the meter that counts what it used.

Every way in to a turn (HTTP, WebSocket) and to a run starts it inside `starting_turn` /
`starting_run`: the tenant's tokens-per-day quota (403, no unit taken), then its turns or runs
per minute (429); a start that fails after that (no such session, the server is full) gives
its unit back, so only work that started counts. Before either, `Runtime.offer_turn` /
`offer_run` asks the admission gate from memory alone, before the body is read: an overloaded
server refuses with no reading, no quota or limiter call, no session lookup (docs/api.md).
`MeteredSink` sits between a turn and its client and adds the provider tokens of the turn's
`turn.completed` event to the tenant's count for the day, before passing the event on (so a
client that left just then is counted all the same).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from agentos.api.keys import QUOTAS
from agentos.api.ratelimit import LIMITERS
from agentos.runtime.turn import TurnSink
from agentos.tenancy.principal import Principal, principal
from agentos.tenancy.quotas import Quotas


@asynccontextmanager
async def starting_turn(app: web.Application, who: Principal) -> AsyncIterator[None]:
    """Around starting a turn: the unit it took is given back if the start fails.

    Raises: QuotaExceeded (`quota_tokens_per_day`), RateLimited (`turn_rate_limited`).
    """
    await app[QUOTAS].admit_tokens(who)
    limiters = app[LIMITERS]
    await limiters.admit_turn(who)
    try:
        yield
    except BaseException:
        limiters.refund_turn(who)
        raise


@asynccontextmanager
async def starting_run(request: web.Request) -> AsyncIterator[None]:
    """Around starting a run, like `starting_turn`.

    Raises: QuotaExceeded (`quota_tokens_per_day`), RateLimited (`run_rate_limited`).
    """
    who = principal(request)
    await request.app[QUOTAS].admit_tokens(who)
    limiters = request.app[LIMITERS]
    await limiters.admit_run(who)
    try:
        yield
    except BaseException:
        limiters.refund_run(who)
        raise


def tokens_of(usage: Any) -> int:
    """Prompt + completion tokens of a usage mapping; 0 for anything else."""
    if not isinstance(usage, dict):
        return 0
    total = 0
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name, 0)
        total += value if isinstance(value, int) else 0
    return total


class MeteredSink:
    """A turn sink that counts the turn's provider tokens against its tenant's day."""

    __slots__ = ("_inner", "_quotas", "_tenant_id")

    def __init__(self, inner: TurnSink, quotas: Quotas, tenant_id: str) -> None:
        self._inner = inner
        self._quotas = quotas
        self._tenant_id = tenant_id

    async def send(self, event_id: Any, name: str, data: dict[str, Any]) -> None:
        if name == "turn.completed":
            self._quotas.add_tokens(self._tenant_id, tokens_of(data.get("usage")))
        await self._inner.send(event_id, name, data)
