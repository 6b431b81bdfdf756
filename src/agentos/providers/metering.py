"""What a model call costs, and the two hooks the router calls around each call: the `Meter`
(budgets: reserve the worst case before, settle to the real cost after) and the `Ledger` (one
row per call, by tenant, key, agent, run, session and day).

Both are protocols owned here and implemented above (`agentos.tenancy`, `agentos.store`): the
router sits below them and must not import them. docs/providers.md says how prices, the ledger
and budgets fit together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentos.config import Price
from agentos.providers.base import CallContext, Usage

PER_TOKENS = 1_000_000  # prices are per million tokens


def cost_of(price: Price | None, usage: Usage) -> float | None:
    """The cost of `usage` at `price`; None without a price (counted in tokens only: no price is
    guessed). Cache reads and writes are part of `prompt_tokens` and billed at their own price
    where one is set, at the input price otherwise."""
    if price is None:
        return None
    cache_read = usage.cache_read_tokens
    cache_write = usage.cache_write_tokens
    plain_input = max(0, usage.prompt_tokens - cache_read - cache_write)
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    total = (
        plain_input * price.input
        + cache_read * read_price
        + cache_write * write_price
        + usage.completion_tokens * price.output
    )
    return total / PER_TOKENS


def worst_case(price: Price | None, prompt_bytes: int, max_tokens: int) -> float | None:
    """The most a call can cost: every byte of the prompt a token (a byte-level tokenizer never
    makes more), cache writes at their price if dearer, and `max_tokens` of output."""
    if price is None:
        return None
    input_price = max(price.input, price.cache_write or 0.0)
    return (prompt_bytes * input_price + max_tokens * price.output) / PER_TOKENS


@dataclass(frozen=True, slots=True)
class Spend:
    """One model call that answered, as the ledger records it."""

    context: CallContext
    model: str  # the model asked for (`[models.NAME]`)
    target: str  # the target that answered ("provider/model")
    usage: Usage
    cost: float | None  # None: the target has no price
    at_ms: int  # when it finished, epoch milliseconds


@dataclass(frozen=True, slots=True)
class Estimate:
    """What the router is about to ask of one target."""

    context: CallContext
    model: str
    target: str
    worst_cost: float | None  # None: the target has no price (a currency budget cannot hold it back)
    max_tokens: int


class Reservation(Protocol):
    """A hold on budgets made by `Meter.reserve`, given back or settled exactly once."""


class Meter(Protocol):
    def idle(self, context: CallContext) -> bool:
        """No budget applies to calls of `context` and no admission hold waits for one: the
        router then skips the estimate and the reservation (the common case costs nothing)."""
        ...

    async def reserve(self, estimate: Estimate) -> Reservation:
        """Hold the worst case against every budget the call counts against.

        Raises: agentos.errors.BudgetExceeded naming the budget that cannot hold it."""
        ...

    async def settle(self, reservation: Reservation, spend: Spend | None) -> None:
        """Replace the hold by what the call cost (`spend`), or give it back (None: no usage,
        the call failed before answering)."""
        ...


class Ledger(Protocol):
    def record(self, spend: Spend) -> None:
        """Queue one row for the store's writer; never blocks the event loop."""
        ...
