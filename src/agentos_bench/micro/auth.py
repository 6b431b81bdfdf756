"""The added request path alone, in process: what B's middleware does per request that A's does not.

Two chains of the real middlewares (`agentos.api.middleware.auth_middleware`, then
`agentos.api.ratelimit.rate_limit_middleware`, the final handler making a `web.Response`, then
`add_rate_headers`), driven without an event loop (each coroutine completes on its first step:
nothing in them waits), on aiohttp's mocked requests carrying a real route:

    keyed: the registry of `tenants` x `keys_per_tenant` keys, an admin token configured (each
           key is also compared with it), limits that never refuse; request i presents key i mod n
    open:  an empty registry, no token, a loopback bind: the open principal, no limits

`added_us` = keyed - open. The parts are timed alone too (parse, HMAC, `authenticate`,
`check_request`), and the tenant filter where it runs, in SQLite: `GET /v1/sessions/{id}` reads
`WHERE session_id = ? AND tenant_id = ?`; the same read without the tenant is the filter's
counterpart. Each figure is the best of `_REPEATS` repeats of `calls / _REPEATS` calls
(timeit's advice: the minimum is the code's cost, the rest is the machine's noise), the figures
timed in turn within each repeat, so a busy moment of a shared machine hits them all alike and
short repeats leave the minimum many chances to find a quiet one; microseconds per call.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import sqlite3
import timeit
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_urldispatcher import DynamicResource, UrlMappingMatchInfo

from agentos.api.middleware import auth_middleware
from agentos.api.ratelimit import Limiters, add_rate_headers, rate_limit_middleware
from agentos.clock import MonotonicClock
from agentos.config.tenants import TenantLimits
from agentos.tenancy import keys as api_keys
from agentos.tenancy.registry import Refused, TenantRegistry
from agentos_bench.authcost.plan import ADMIN_TOKEN, NEVER_REFUSING_RATE

_REPEATS = 20
_ROUTE = "/v1/sessions/{session_id}"
Chain = Callable[[web.Request], web.StreamResponse]


def drive(coroutine: Awaitable[Any]) -> Any:
    """The value of a coroutine that never suspends (a middleware whose handler returns at once)."""
    assert isinstance(coroutine, Coroutine)
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the coroutine suspended: not a synchronous path")


async def _final(request: web.Request) -> web.StreamResponse:
    return web.Response()


def _chain(token: str, registry: TenantRegistry, limiters: Limiters) -> Chain:
    auth = auth_middleware(token, registry, loopback=True)
    limit = rate_limit_middleware(limiters)

    async def after_auth(request: web.Request) -> web.StreamResponse:
        return await limit(request, _final)

    def one(request: web.Request) -> web.StreamResponse:
        response: web.StreamResponse = drive(auth(request, after_auth))
        drive(add_rate_headers(request, response))
        return response

    return one


def _request(authorization: str | None) -> web.Request:
    headers = {"Authorization": authorization} if authorization else None
    request = make_mocked_request("GET", "/v1/sessions/s-bench", headers=headers)
    route = DynamicResource(_ROUTE).add_route("GET", _final)
    request._match_info = UrlMappingMatchInfo({"session_id": "s-bench"}, route)  # as the router would
    return request


async def _registry(tenants: int, keys_per_tenant: int, pepper: bytes) -> tuple[TenantRegistry, list[str]]:
    limits = TenantLimits(requests_per_minute=NEVER_REFUSING_RATE, key_requests_per_minute=NEVER_REFUSING_RATE)
    registry = TenantRegistry(None, pepper, defaults=limits)
    await registry.open()
    made = []
    for t in range(tenants):
        await registry.create_tenant(f"bench-{t:04d}")
        for _ in range(keys_per_tenant):
            made.append((await registry.create_key(f"bench-{t:04d}"))[0])
    return registry, made


def _best_us(fns: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Microseconds per call of each of `fns`: the best of `_REPEATS` interleaved repeats."""
    number = max(1, calls // _REPEATS)
    timers = {name: timeit.Timer(fn) for name, fn in fns.items()}
    for fn in fns.values():
        fn()  # the first call may fill caches (the policy string); not the steady state
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(_REPEATS):
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(number))
    return {name: seconds / number * 1e6 for name, seconds in best.items()}


def micro_bench(tenants: int, keys_per_tenant: int, calls: int, sessions_db: Path | None = None) -> dict[str, Any]:
    """Microseconds per call of the keyed and the open path and of their parts (module docstring)."""
    pepper = secrets.token_bytes(32)
    registry, made = asyncio.run(_registry(tenants, keys_per_tenant, pepper))
    empty, _ = asyncio.run(_registry(0, 0, pepper))
    limiters = Limiters(MonotonicClock())
    keyed, opened = _chain(ADMIN_TOKEN, registry, limiters), _chain("", empty, Limiters(MonotonicClock()))
    keyed_requests = itertools.cycle([_request(f"Bearer {k}") for k in made])
    open_request = _request(None)
    parsed = [api_keys.parse(k) for k in made]
    cycle_keys, cycle_parsed = itertools.cycle(made), itertools.cycle(parsed)
    principal = registry.authenticate(made[0])
    if isinstance(principal, Refused):
        raise RuntimeError(f"a fresh key was refused: {principal.reason}")
    result: dict[str, Any] = {"calls": calls, "repeats": _REPEATS, "keys": len(made)}
    result |= _best_us(
        {
            "keyed_path_us": lambda: keyed(next(keyed_requests)),
            "open_path_us": lambda: opened(open_request),
            "parse_us": lambda: api_keys.parse(next(cycle_keys)),
            "hmac_us": lambda: api_keys.hash_secret(pepper, next(cycle_parsed).secret),
            "authenticate_us": lambda: registry.authenticate(next(cycle_keys)),
            "check_request_us": lambda: limiters.check_request(principal),
        },
        calls,
    )
    result["added_us"] = result["keyed_path_us"] - result["open_path_us"]
    if sessions_db is not None and sessions_db.exists():
        result |= tenant_filter_us(sessions_db, calls)
    return result


def tenant_filter_us(sessions_db: Path, calls: int) -> dict[str, float]:
    """`GET /v1/sessions/{id}`'s read with and without its tenant predicate (read-only connection)."""
    conn = sqlite3.connect(f"file:{sessions_db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT session_id, tenant_id FROM sessions").fetchall()
        with_tenant, by_id = itertools.cycle(rows), itertools.cycle([(s,) for s, _ in rows])
        filtered = "SELECT * FROM sessions WHERE session_id = ? AND tenant_id = ?"
        unfiltered = "SELECT * FROM sessions WHERE session_id = ?"
        found = _best_us(
            {
                "read_with_tenant_us": lambda: conn.execute(filtered, next(with_tenant)).fetchone(),
                "read_without_tenant_us": lambda: conn.execute(unfiltered, next(by_id)).fetchone(),
            },
            calls,
        )
    finally:
        conn.close()
    found["tenant_filter_us"] = found["read_with_tenant_us"] - found["read_without_tenant_us"]
    return found
