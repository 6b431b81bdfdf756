"""What a caller must pass before new work starts.

Every way in to a turn (HTTP, WebSocket) and to a run starts it inside `starting_turn` /
`starting_run`: the tenant's tokens-per-day quota (403, no unit taken), then its turns or runs
per minute (429); a start that fails after that (no such session, the server is full) gives
its unit back, so only work that started counts. Before either, `Runtime.offer_turn` /
`offer_run` asks the admission gate from memory alone, before the body is read: an overloaded
server refuses with no reading, no quota or limiter call, no session lookup (docs/api.md).
The tokens a turn or a run used are counted where the model call ends, by the runtime and the
runs alike (`on_usage`, wired by `open_services` to the tenant's day).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from agentos.api.keys import QUOTAS
from agentos.api.ratelimit import LIMITERS
from agentos.tenancy.principal import Principal, principal


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
