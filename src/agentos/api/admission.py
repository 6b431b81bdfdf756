"""May this work start? One room decides, in one order, for every turn (HTTP, WebSocket, the
OpenAI door) and every run.

The order (docs/api.md, "Admission"); each step refuses before the next one costs anything:

1. `auth_middleware` and `rate_limit_middleware`, for every request: the key (401) and the
   request rate of the key and the tenant (429 `rate_limited`).
2. `Admission.offer`, from memory alone and before the body is read: draining (503
   `shutting_down`), then the kernel's gate (429 `overloaded`, `tenant_concurrent_turns`,
   `tenant_active_runs`). Passing reserves nothing: an overloaded server refuses with no
   reading, no quota or limiter call and no session lookup.
3. The handler reads and checks the body (413, 400, 422; `runtime.turn.check_input`).
4. `Admission.starting`, around the start itself: the tenant's tokens-per-day quota (403
   `quota_tokens_per_day`, nothing taken), then its turns or runs per minute (429
   `turn_rate_limited` / `run_rate_limited`). A start that fails inside (no such session, the
   gate full after all) gives the unit back, so only work that started counts.
5. Inside the start, the runtime (`Turns.start`) or the runs (`RunService.start_run`): the
   session (404), the tenant's place in the cluster (`Driver.hold_turn` / `hold_run`), and the
   kernel's `TurnSubmitted` / `RunSubmitted`, which decides for real (429 again).

The tokens a turn or a run used are counted where the model call ends, by the runtime and the
runs alike (`on_usage`, wired by `open_services` to the tenant's day).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from aiohttp import web

from agentos.api.ratelimit import Limiters
from agentos.runtime.runtime import Runtime
from agentos.tenancy.principal import Principal
from agentos.tenancy.quotas import Quotas

Work = Literal["turn", "run"]


class Admission:
    """Usage::

    admission = request.app[ADMISSION]
    admission.offer(who, "turn")  # before the body
    body = await read_body(request, TurnCreate)
    async with admission.starting(who, "turn"):
        turn = await runtime.start_turn(...)
    """

    def __init__(self, runtime: Runtime, quotas: Quotas, limiters: Limiters) -> None:
        self._runtime = runtime
        self._quotas = quotas
        self._limiters = limiters

    def offer(self, who: Principal, work: Work) -> None:
        """Step 2: refuse at once when the server drains or the gate is full.

        Raises: ShuttingDown; AdmissionRejected (`overloaded`, `tenant_concurrent_turns`,
            `tenant_active_runs`)."""
        if work == "turn":
            self._runtime.offer_turn(who.tenant_id)
        else:
            self._runtime.offer_run(who.tenant_id)

    @asynccontextmanager
    async def starting(self, who: Principal, work: Work) -> AsyncIterator[None]:
        """Step 4, around the start: the unit it took is given back if the start fails.

        Raises: QuotaExceeded (`quota_tokens_per_day`); RateLimited (`turn_rate_limited`,
            `run_rate_limited`)."""
        await self._quotas.admit_tokens(who)
        if work == "turn":
            await self._limiters.admit_turn(who)
        else:
            await self._limiters.admit_run(who)
        try:
            yield
        except BaseException:
            if work == "turn":
                self._limiters.refund_turn(who)
            else:
                self._limiters.refund_run(who)
            raise


ADMISSION: web.AppKey[Admission] = web.AppKey("admission", Admission)
