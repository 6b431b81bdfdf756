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
   `quota_tokens_per_day`, nothing taken), then its spending budgets (402 `budget_exceeded`:
   the first model call's worst case is held on the tenant's and the key's budgets, and the
   call takes that hold over, `agentos.tenancy.budgets`), then its turns or runs per minute (429
   `turn_rate_limited` / `run_rate_limited`). A start that fails inside (no such session, the
   gate full after all) gives the unit and the hold back, so only work that started counts.
5. Inside the start, the runtime (`Turns.start`) or the runs (`RunService.start_run`): the
   session (404; for an end user's token, also another user's: `agentos.api.owners`), the
   user's turns at once (429 `user_concurrent_turns`), the tenant's place in the cluster
   (`Driver.hold_turn` / `hold_run`), and the kernel's `TurnSubmitted` / `RunSubmitted`, which
   decides for real (429 again).

The tokens a turn or a run used are counted where the model call ends, by the runtime and the
runs alike (`on_usage`, wired by `open_services` to the tenant's day).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from aiohttp import web

from agentos.api.ratelimit import Limiters, Work
from agentos.config.provider import Route
from agentos.providers.base import CallContext
from agentos.providers.metering import Estimate, worst_case
from agentos.runtime.runtime import Runtime
from agentos.tenancy.budgets import Budgets, Hold
from agentos.tenancy.principal import Principal
from agentos.tenancy.quotas import Quotas


class Models(Protocol):
    """What admission asks of the router (`agentos.providers.router.Router`): the model a turn
    calls when it names none, and each model's targets (the first is the one tried first)."""

    @property
    def default_model(self) -> str: ...

    def models(self) -> dict[str, list[Route]]: ...


class Started:
    """What `Admission.starting` yields: `bind` names the turn (or run) its budget hold is for."""

    __slots__ = ("_budgets", "_hold")

    def __init__(self, budgets: Budgets | None, hold: Hold | None) -> None:
        self._budgets = budgets
        self._hold = hold

    def bind(self, call_id: str, session_id: str = "") -> None:
        """The work started as `call_id` (a turn id, a run id) in `session_id`: its first model
        call takes the hold over instead of holding its worst case again."""
        if self._budgets is not None and self._hold is not None:
            self._budgets.bind(self._hold, call_id, session_id)

    async def release(self) -> None:
        if self._budgets is not None and self._hold is not None:
            await self._budgets.release(self._hold)


class Admission:
    """Usage::

    admission = request.app[ADMISSION]
    admission.offer(who, "turn")  # before the body
    body = await read_body(request, TurnCreate)
    async with admission.starting(who, "turn", body.input) as started:
        turn = await runtime.start_turn(...)
        started.bind(turn.turn_id)
    """

    def __init__(
        self,
        runtime: Runtime,
        quotas: Quotas,
        limiters: Limiters,
        *,
        budgets: Budgets | None = None,
        models: Models | None = None,
    ) -> None:
        self._runtime = runtime
        self._quotas = quotas
        self._limiters = limiters
        self._budgets = budgets if models is not None else None  # no router: nothing is priced
        self._models = models

    def offer(self, who: Principal, work: Work) -> None:
        """Step 2: refuse at once when the server drains or the gate is full.

        Raises: ShuttingDown; AdmissionRejected (`overloaded`, `tenant_concurrent_turns`,
            `tenant_active_runs`)."""
        if work == "turn":
            self._runtime.offer_turn(who.tenant_id)
        else:
            self._runtime.offer_run(who.tenant_id)

    @asynccontextmanager
    async def starting(
        self,
        who: Principal,
        work: Work,
        text: str = "",
        *,
        run: tuple[str, float] = ("", 0.0),
        model: str | None = None,
    ) -> AsyncIterator[Started]:
        """Step 4, around the start: the unit it took and the budget hold are given back if the
        start fails. `text`: the input (its bytes count in the first call's worst case); `run`:
        the id a run will have and its own budget (`max_cost`, 0: none), held on too; `model`:
        the model its first call asks for (None: the default model).

        Raises: QuotaExceeded (`quota_tokens_per_day`); BudgetExceeded (`budget_exceeded`);
            RateLimited (`turn_rate_limited`, `run_rate_limited`); StoreUnavailable (budgets in
            a Redis that does not answer)."""
        await self._quotas.admit_tokens(who)
        started = Started(self._budgets, await self._hold(who, text, run, model))
        try:
            await self._limiters.admit_start(work, who)
        except BaseException:
            await started.release()
            raise
        try:
            yield started
        except BaseException:
            self._limiters.refund_start(work, who)
            await started.release()
            raise

    async def _hold(self, who: Principal, text: str, run: tuple[str, float], model: str | None) -> Hold | None:
        """Hold the worst case of the first model call (its model's first target, this input,
        its `max_tokens`) on the tenant's and the key's budgets (and the run's). The call itself holds
        its own worst case (the whole conversation, the target it reaches) by topping this up."""
        if self._budgets is None or self._models is None:
            return None
        model = model or self._models.default_model
        routes = self._models.models().get(model) or self._models.models().get(self._models.default_model) or []
        route = routes[0] if routes else None
        price, max_tokens = (route.price, route.max_tokens) if route is not None else (None, 0)
        worst = worst_case(price, len(text.encode()), max_tokens)
        context = CallContext(tenant_id=who.tenant_id, key_id=who.key_id or "", run_id=run[0], max_cost=run[1])
        target = route.name if route is not None else model
        return await self._budgets.hold_call(Estimate(context, model, target, worst, max_tokens))


ADMISSION: web.AppKey[Admission] = web.AppKey("admission", Admission)
