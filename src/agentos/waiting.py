"""Waiting for an `asyncio.Event` with a timeout, without ever swallowing a cancel.

Python 3.11's `asyncio.wait_for` runs the wait as a task of its own; when a cancel reaches the
caller in the same loop step as that task completes (the event was set, or the timeout fired),
`wait_for` returns the result and the cancel is lost. A loop that waits this way between rounds
then goes on after `close()` cancelled it, and the close hangs (a server close hung 60 s in CI).
`asyncio.timeout` waits in the caller's own task and tells its own expiry from an outside cancel
by the task's cancel count, so the outside cancel always propagates.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` has passed.

    Args:
        event: the event to wait for.
        timeout_s: the longest wait in seconds; None waits for as long as it takes.

    Returns:
        Whether the event is set when the wait ends (False: the time ran out).

    Raises:
        asyncio.CancelledError: the caller was cancelled during the wait, even in the same loop
            step as the event was set or the time ran out.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()
