"""GCRA rate limits in Redis: one Lua script decides, takes and refunds, on Redis's clock.

The algorithm is `agentos.tenancy.ratelimit`'s (read its docstring first): one theoretical
arrival time (TAT) per key, a one-minute window, a burst of the per-minute limit. Here the TAT
lives in Redis and the script runs atomically there, so every node shares one limit:

- `now` is Redis `TIME` inside the script, never a node's clock (nodes' clocks may disagree);
- one call checks one or two keys (a key's and its tenant's limit) in one round trip, and takes
  a unit from all of them only if all allow: a refusal takes nothing;
- a TAT is stored as integer microseconds with an expiry at the TAT (`PX`): once the bucket is
  full again the key means nothing and Redis drops it, so idle keys vanish by themselves;
- the interval is whole microseconds and the window `q * interval`, so a burst is exactly `q`;
- the script is sent once (EVALSHA; redis-py's `Script` loads it again on NOSCRIPT, after a
  Redis restart or SCRIPT FLUSH).

The answers are the same `Decision`s the in-process limiter makes (times in seconds), so the
middleware builds the same headers and 429s from either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentos.tenancy.ratelimit import Decision

if TYPE_CHECKING:
    from redis.asyncio import Redis

_US = 1_000_000

# KEYS: the limits' keys. ARGV[1]: "take" or "refund"; ARGV[1 + i]: KEYS[i]'s per-minute limit.
# take returns {all_allowed, then per key: allowed, remaining, reset_us, retry_after_us}.
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function interval(i)
  return math.max(1, math.floor(60000000 / tonumber(ARGV[i + 1]) + 0.5))
end
local function store(key, tat)
  if tat > now then
    redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
  else
    redis.call('DEL', key)
  end
end
if ARGV[1] == 'refund' then
  for i = 1, #KEYS do
    local tat = tonumber(redis.call('GET', KEYS[i]))
    if tat then store(KEYS[i], tat - interval(i)) end
  end
  return {}
end
local out, tats, all = {1}, {}, 1
for i = 1, #KEYS do
  local step = interval(i)
  local window = step * tonumber(ARGV[i + 1])
  local stored = tonumber(redis.call('GET', KEYS[i])) or now
  if stored < now then stored = now end
  local tat = stored + step
  local ahead = tat - now
  if ahead > window then
    all = 0
    local wait = ahead - window
    for _, v in ipairs({0, 0, wait, wait}) do out[#out + 1] = v end
  else
    local slack = window - ahead
    local remaining = math.floor(slack / step)
    for _, v in ipairs({1, remaining, (remaining + 1) * step - slack, 0}) do out[#out + 1] = v end
    tats[i] = tat
  end
end
out[1] = all
if all == 1 then
  for i = 1, #KEYS do store(KEYS[i], tats[i]) end
end
return out
"""


class RedisGcra:
    """The script, registered once on a client. Keys are full Redis keys (prefix included)."""

    def __init__(self, redis: Redis) -> None:
        self._script = redis.register_script(_SCRIPT)

    async def take(self, limits: Sequence[tuple[str, int]]) -> list[Decision]:
        """Decide every `(key, per_minute)` (per_minute > 0) at once; take one unit from each
        only if every one allows. The decisions are in the order given."""
        keys = [key for key, _ in limits]
        args: list[Any] = ["take", *(rate for _, rate in limits)]
        raw = await self._script(keys=keys, args=args)
        decisions = []
        for i, (_, rate) in enumerate(limits):
            allowed, remaining, reset_us, wait_us = (int(v) for v in raw[1 + 4 * i : 5 + 4 * i])
            decisions.append(Decision(bool(allowed), rate, remaining, reset_us / _US, wait_us / _US, 0.0))
        return decisions

    async def refund(self, key: str, per_minute: int) -> None:
        """Give one unit back to `key` (the work it admitted did not start)."""
        await self._script(keys=[key], args=["refund", per_minute])
