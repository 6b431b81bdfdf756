"""Calls to Redis that many requests make at once, sent as one: the first caller's call goes
out at once, the callers that come while it is in flight share the next one.

Under load a node starts hundreds of provider streams a second; one Lua call each cost a
round trip and a trip through redis-py's connection pool per stream. Batched, the cost per
stream falls as the load rises, and an idle node pays no linger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batches(Generic[T, R]):
    """`await submit(item)`: its result from `call(items)`, which returns one result per item
    in order, or None for all (Redis down: each caller decides alone)."""

    def __init__(self, call: Callable[[list[T]], Awaitable[list[R] | None]], *, max_items: int = 500) -> None:
        self._call = call
        self._max_items = max_items
        self._pending: list[tuple[T, asyncio.Future[R | None]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, item: T) -> asyncio.Future[R | None]:
        future: asyncio.Future[R | None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return future

    async def wait_idle(self) -> None:
        """Until every submitted item has had its call (close, tests)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[: self._max_items], self._pending[self._max_items :]
                try:
                    results = await self._call([item for item, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for i, (_, future) in enumerate(batch):
                    if not future.done():
                        future.set_result(None if results is None else results[i])
        finally:
            self._task = None
