"""The router's figures on the server's `GET /metrics`, read every `poll_s` while the campaign runs.

Only the `agentos_provider_*` lines are parsed on each poll (the histogram buckets are skipped),
so that a poll every 50 ms costs the load generator little; the last read, after the load, keeps
the TTFT histogram's sum and count too. A scrape's time is the moment its answer arrived; the
state it shows was true somewhere between its `sent` and that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

_PREFIX = "agentos_provider_"
_SCRAPE_TIMEOUT_S = 5.0


@dataclass(slots=True)
class TargetFigures:
    """One target's counters and breaker state in one scrape."""

    requests: int = 0
    fallbacks: int = 0
    breaker: int = 0  # 0 closed, 1 open, 2 half-open
    failures: dict[str, int] = field(default_factory=dict)  # by reason
    ttft_sum_s: float = 0.0
    ttft_count: int = 0


@dataclass(frozen=True, slots=True)
class Scrape:
    sent: float  # loop time
    received: float
    targets: dict[str, TargetFigures]


def provider_figures(text: str, *, buckets: bool = False) -> dict[str, TargetFigures]:
    """Each target's figures in one `/metrics` answer (`buckets`: parse the TTFT histogram's lines too)."""
    lines = [
        line
        for line in text.splitlines()
        if line.startswith(_PREFIX) and (buckets or not line.startswith("agentos_provider_ttft_seconds_bucket"))
    ]
    found: dict[str, TargetFigures] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            target = sample.labels.get("target")
            if target is None:
                continue
            figures = found.setdefault(target, TargetFigures())
            name, value = sample.name.removeprefix(_PREFIX), sample.value
            if name == "requests_total":
                figures.requests = int(value)
            elif name == "fallbacks_total":
                figures.fallbacks = int(value)
            elif name == "breaker_state":
                figures.breaker = int(value)
            elif name == "failures_total":
                figures.failures[sample.labels.get("reason", "")] = int(value)
            elif name == "ttft_seconds_sum":
                figures.ttft_sum_s = value
            elif name == "ttft_seconds_count":
                figures.ttft_count = int(value)
    return found


async def scrape(http: aiohttp.ClientSession, url: str, *, buckets: bool = False) -> Scrape | None:
    """One read of `url`/metrics; None when it did not answer 200 in time."""
    loop = asyncio.get_running_loop()
    sent = loop.time()
    try:
        async with http.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=_SCRAPE_TIMEOUT_S)) as response:
            if response.status != 200:
                return None
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    return Scrape(sent, loop.time(), provider_figures(text, buckets=buckets))


@dataclass(slots=True)
class Poller:
    """Reads the server's figures every `poll_s` until `stop` is set; `scrapes` in order."""

    http: aiohttp.ClientSession
    url: str
    poll_s: float
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    scrapes: list[Scrape] = field(default_factory=list)
    failed: int = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not self.stop.is_set():
            found = await scrape(self.http, self.url)
            if found is None:
                self.failed += 1
            else:
                self.scrapes.append(found)
            next_at = max(next_at + self.poll_s, loop.time())  # a slow scrape is not made up for by a burst
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(0.0, next_at - loop.time()))
