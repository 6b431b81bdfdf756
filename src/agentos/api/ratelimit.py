"""Rate limits at the edge: requests per key and per tenant, turns and runs started per tenant.

The middleware runs after auth, on the principal it set, and before any handler: a refused
request costs no database read. A request is checked against its key's limit
(`key_requests_per_minute`; the open, key-less principal counts as one key) and its tenant's
(`requests_per_minute`, all its keys together: keys are free to mint, so a per-key limit alone
is no limit). It takes a unit from both only if both allow it, so a 429 costs nothing.

Answers follow draft-ietf-httpapi-ratelimit-headers-10 (September 2025): Structured Fields
(RFC 9651) naming each policy as a String, on every response of a limited caller, 429s included:

    RateLimit-Policy: "key";q=100;w=60, "tenant";q=1000;w=60
    RateLimit: "key";r=99;t=1, "tenant";r=990;t=1

`q` is the quota per window `w` (seconds; the burst is the quota, see `tenancy.ratelimit`), `r`
the units left now, `t` the seconds until one more unit is available (-10's reading of `t`).
A 429 also carries `Retry-After` (whole seconds, at least 1), which takes precedence.

The headers are added when the response is prepared (`on_response_prepare`), so an event stream,
whose headers leave before its handler returns, carries them too. Routes that need no token
(/healthz, /readyz, /openapi.json, /docs) are never limited. `Limiters` is per process; with
`coordination.redis_url` set, `agentos.api.cluster_limits.ClusterLimiters` makes the same
decisions in Redis, for every node together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.api.errors import Handler, error_response
from agentos.api.middleware import OPEN_ROUTES, route_of
from agentos.clock import Clock
from agentos.config.tenants import TenantLimits
from agentos.errors import RateLimited
from agentos.tenancy.principal import PRINCIPAL, Principal
from agentos.tenancy.ratelimit import WINDOW_S, Decision, Gcra

# The key the open (key-less) principal is counted under.
OPEN_KEY = "-"

Work = Literal["turn", "run"]


@dataclass(frozen=True, slots=True)
class Starts:
    """Starts of one kind of work that a tenant, and each of its end users, may make per minute."""

    what: str  # "turns", "runs": in the 429's message, and the limiter's name
    code: str  # the 429's code
    tenant_rate: Callable[[TenantLimits], int]
    user_rate: Callable[[TenantLimits], int]


STARTS: dict[Work, Starts] = {
    "turn": Starts("turns", "turn_rate_limited", lambda ls: ls.turns_per_minute, lambda ls: ls.user_turns_per_minute),
    "run": Starts("runs", "run_rate_limited", lambda ls: ls.runs_per_minute, lambda ls: ls.user_runs_per_minute),
}


def limit_key(who: Principal) -> str:
    """The bucket of `key_requests_per_minute` that `who` draws from: its key's; an end user's
    own (a user's token is limited as a key is, each user alone: a tenant's users do not share
    one bucket, and one user cannot spend another's); the open principal's."""
    if who.key_id is not None:
        return who.key_id
    if who.subject is not None:
        return f"user:{who.tenant_id}:{who.subject}"  # ':' never appears in a key id
    return OPEN_KEY


def user_key(who: Principal) -> str | None:
    """The bucket of an end user's own turns and runs per minute (`user_turns_per_minute`,
    `user_runs_per_minute`): the user's, whatever credential carries them (their token, or a
    browser token minted for them by a key); None: no user (a tenant key)."""
    return None if who.subject is None else f"user:{who.tenant_id}:{who.subject}"


RATE_HEADERS: web.RequestKey[dict[str, str]] = web.RequestKey("rate_headers", dict)


def retry_after(seconds: float) -> int:
    """`Retry-After` in whole seconds: rounded up, and at least 1 (0 would invite a busy loop)."""
    return max(1, math.ceil(seconds))


class Limiters:
    """The process's rate limiters, on one clock (the server's monotonic one; a FakeClock in tests)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.keys = Gcra()
        self.tenants = Gcra()
        self.started = {starts.what: Gcra() for starts in STARTS.values()}
        self._policies: dict[tuple[int, int], str] = {}

    # -- what the API awaits: `ClusterLimiters` (agentos.coordination) decides these in Redis --

    async def admit_request(self, who: Principal) -> tuple[dict[str, str], web.Response | None]:
        """`check_request`, awaitable."""
        return self.check_request(who)

    async def admit_start(self, work: Work, who: Principal) -> None:
        """`check_start`, awaitable."""
        self.check_start(STARTS[work], who)

    # -- in process -------------------------------------------------------------------------------

    def check_request(self, who: Principal) -> tuple[dict[str, str], web.Response | None]:
        """The RateLimit headers for `who`'s request, and the 429 to answer if it is over a limit."""
        limits = who.limits
        now = self.clock.now()
        key_rate, tenant_rate = limits.key_requests_per_minute, limits.requests_per_minute
        bucket = limit_key(who)
        by_key = self.keys.decide(bucket, key_rate, now, commit=False) if key_rate else None
        by_tenant = self.tenants.decide(who.tenant_id, tenant_rate, now, commit=False) if tenant_rate else None
        headers, refused = self.answer(who, by_key, by_tenant)
        if refused is not None:
            return headers, refused
        if by_key is not None:
            self.keys.commit(bucket, by_key, now)
        if by_tenant is not None:
            self.tenants.commit(who.tenant_id, by_tenant, now)
        return headers, None

    def answer(
        self, who: Principal, by_key: Decision | None, by_tenant: Decision | None
    ) -> tuple[dict[str, str], web.Response | None]:
        """The headers and the 429 (None: allowed) of a request's two decisions; a refusal took nothing."""
        refused = _refused(by_key, by_tenant)
        state = _state(by_key, by_tenant, taken=refused is None)
        policy = self._policy(who.limits.key_requests_per_minute, who.limits.requests_per_minute)
        return {"RateLimit-Policy": policy, "RateLimit": state}, refused

    def check_start(self, starts: Starts, who: Principal) -> None:
        """Raises: RateLimited (`turn_rate_limited`, `run_rate_limited`): the tenant made its
        `turns_per_minute` (`runs_per_minute`) starts, or the end user its `user_...` ones."""
        self.check_user_start(starts, who)
        try:
            self.check_tenant_start(starts, who)
        except RateLimited:
            self._refund_user(starts, who)
            raise

    def check_tenant_start(self, starts: Starts, who: Principal) -> None:
        self._take(starts, who.tenant_id, starts.tenant_rate(who.limits))

    def check_user_start(self, starts: Starts, who: Principal) -> None:
        """The end user's own starts per minute (in process; a key's principal passes)."""
        bucket = user_key(who)
        if bucket is not None:
            self._take(starts, bucket, starts.user_rate(who.limits), "user")

    def refund_start(self, work: Work, who: Principal) -> None:
        """The start `admit_start` admitted did not happen (no such session, the server is full)."""
        starts = STARTS[work]
        if per_minute := starts.tenant_rate(who.limits):
            self.started[starts.what].refund(who.tenant_id, per_minute)
        self._refund_user(starts, who)

    def _refund_user(self, starts: Starts, who: Principal) -> None:
        per_minute = starts.user_rate(who.limits)
        bucket = user_key(who)
        if per_minute and bucket is not None:
            self.started[starts.what].refund(bucket, per_minute)

    def _take(self, starts: Starts, key: str, per_minute: int, whose: str = "tenant") -> None:
        if per_minute:
            decision = self.started[starts.what].decide(key, per_minute, self.clock.now())
            raise_if_refused(decision, starts.code, starts.what, whose)

    def _policy(self, key_rate: int, tenant_rate: int) -> str:
        policy = self._policies.get((key_rate, tenant_rate))
        if policy is None:
            window = int(WINDOW_S)
            rates = (("key", key_rate), ("tenant", tenant_rate))
            items = [f'"{name}";q={rate};w={window}' for name, rate in rates if rate]
            policy = self._policies[(key_rate, tenant_rate)] = ", ".join(items)
        return policy


LIMITERS: web.AppKey[Limiters] = web.AppKey("limiters")


def raise_if_refused(decision: Decision, code: str, what: str, whose: str = "tenant") -> None:
    """Raises: RateLimited (`code`) when `decision` refused a start of `what` (turns, runs) by
    `whose` limit (the tenant's, or an end user's own)."""
    if not decision.allowed:
        wait = retry_after(decision.retry_after)
        raise RateLimited(
            f"over the {whose}'s {decision.limit} {what} per minute; retry after {wait}s",
            code=code,
            retry_after_s=wait,
        )


def _state(by_key: Decision | None, by_tenant: Decision | None, *, taken: bool) -> str:
    """The `RateLimit` field. A refused request took nothing, so a limit that would have allowed
    it still has the unit its decision counted as taken."""
    items = []
    for name, d in (("key", by_key), ("tenant", by_tenant)):
        if d is not None:
            left = d.remaining if taken or not d.allowed else d.remaining + 1
            wait = 0 if left >= d.limit else math.ceil(d.reset)  # a full bucket waits for nothing
            items.append(f'"{name}";r={left};t={wait}')
    return ", ".join(items)


def _refused(by_key: Decision | None, by_tenant: Decision | None) -> web.Response | None:
    """The 429 for the first limit that refuses, or None. The key's is named first: it is the
    one the caller can do something about by itself."""
    for decision, code, whose in ((by_key, "key_rate_limited", "key"), (by_tenant, "tenant_rate_limited", "tenant")):
        if decision is not None and not decision.allowed:
            wait = retry_after(decision.retry_after)
            message = f"over the {whose}'s {decision.limit} requests per minute; retry after {wait}s"
            return error_response(429, code, message, {"Retry-After": str(wait)})
    return None


def rate_limit_middleware(limiters: Limiters) -> Middleware:
    """Limits every request of a principal with a request limit; see the module docstring."""

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        who = request.get(PRINCIPAL)  # None: an open route on a server with a token
        if who is None or not _limited(who.limits) or route_of(request) in OPEN_ROUTES:
            return await handler(request)
        headers, refused = await limiters.admit_request(who)
        request[RATE_HEADERS] = headers
        if refused is not None:
            return refused
        return await handler(request)

    return limit


def _limited(limits: TenantLimits) -> bool:
    return bool(limits.key_requests_per_minute or limits.requests_per_minute)


async def add_rate_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the RateLimit headers, before the status line leaves."""
    headers = request.get(RATE_HEADERS)
    if headers:
        response.headers.update(headers)
