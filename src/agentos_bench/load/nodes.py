"""Load over several server nodes: sessions placed round-robin, turns sent per the spread mode.

Usage::

    placement = RoundRobin(3)
    target = NodesTarget(["http://127.0.0.1:8001", "http://127.0.0.1:8002", ...], placement, spread="turn")
    row = (await run_point(target, http, PointPlan(concurrency=1000), probes)).as_row()

Theory of operation. The nodes share one store (PostgreSQL) and one Redis, so any node may serve
any session: there is no stickiness to honour, only a choice of how to spread the load.

- `spread="session"`: a session is created on the next node in round-robin order and all its
  turns go to that node (what a load balancer hashing on the session would do).
- `spread="turn"`: the session is created the same way, but each of its turns goes to the node
  after the previous turn's, so consecutive turns of one session never meet the same node twice
  in a row (a balancer with no affinity at all; the hard case for cross-node last-wins and for
  streams followed on another node).

One `RoundRobin` is shared by every target of a point (one per tenant with `--tenants`), so the
sessions of all tenants together are spread evenly (user i -> node i mod N), not each tenant's
from node 0. With tenants, each node has its own key of each tenant (`api_keys[node]`): the keys
are made per node through its admin API, which works whether tenants live in each node's own
database or in the shared one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import aiohttp

from agentos_bench.load.double_text import DoubleText, EnqueueTarget
from agentos_bench.load.openai_target import Api, OpenAITarget
from agentos_bench.load.sweep_tenants import tenant_name
from agentos_bench.load.targets import ServerTarget, Target, TurnSample

Spread = Literal["session", "turn"]
SPREADS: tuple[Spread, ...] = ("session", "turn")


class RoundRobin:
    """The node of the next new session: 0, 1, …, N-1, 0, … (shared by a point's targets)."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self._next = 0

    def take(self) -> int:
        node = self._next
        self._next = (node + 1) % self.nodes
        return node


class NodesTarget:
    """Agent OS on several nodes; one session per worker, as `ServerTarget` (see the module doc)."""

    def __init__(
        self,
        base_urls: Sequence[str],
        placement: RoundRobin,
        *,
        spread: Spread = "session",
        api_keys: Sequence[str | None] | None = None,
        name: str = "server",
    ) -> None:
        keys = list(api_keys) if api_keys is not None else [None] * len(base_urls)
        if not base_urls or len(keys) != len(base_urls) or placement.nodes != len(base_urls):
            raise ValueError("NodesTarget needs one URL (and one key, if any) per node of the placement")
        self.name = name
        self._nodes = [ServerTarget(url, api_key=key, name=name) for url, key in zip(base_urls, keys, strict=True)]
        self._placement = placement
        self._spread = spread
        self._next_node: dict[str, int] = {}  # session id -> the node of its next turn
        self.turns_per_node = [0] * len(base_urls)  # every turn sent, counted or not (for tests and logs)

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        node = self._placement.take()
        worker = f"{node}/{await self._nodes[node].open_worker(http)}"  # unique even if two nodes' ids met
        self._next_node[worker] = node
        return worker

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        key = str(worker)
        node = self._next_node[key]
        if self._spread == "turn":
            self._next_node[key] = (node + 1) % len(self._nodes)
        self.turns_per_node[node] += 1
        return await self._nodes[node].turn(http, _session(key), timeout_s)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        key = str(worker)
        node = self._next_node.pop(key, int(key.partition("/")[0]))  # any node can delete a shared session
        await self._nodes[node].close_worker(http, _session(key))


def _session(worker: str) -> str:
    """The session id in a worker's `<home node>/<session id>`."""
    return worker.partition("/")[2]


def point_targets(
    urls: Sequence[str],
    spread: Spread = "session",
    keys_by_node: Sequence[Sequence[str]] | None = None,
    api: Api = "native",
    double_text: DoubleText = "none",
) -> list[Target]:
    """The targets of one point: one per tenant (`keys_by_node[node][tenant]`), or one without
    keys; on one node plain `ServerTarget`s (`OpenAITarget`s with `api="openai"`, `EnqueueTarget`s
    with `double_text="enqueue"`), on several `NodesTarget`s sharing one placement (native turns only)."""
    one: type[ServerTarget | EnqueueTarget] = OpenAITarget if api == "openai" else ServerTarget
    if double_text == "enqueue":
        one = EnqueueTarget
    if keys_by_node is None:
        return [one(urls[0]) if len(urls) == 1 else NodesTarget(urls, RoundRobin(len(urls)), spread=spread)]
    placement = RoundRobin(len(urls))
    targets: list[Target] = []
    for j in range(len(keys_by_node[0])):
        keys = [node_keys[j] for node_keys in keys_by_node]
        if len(urls) == 1:
            targets.append(one(urls[0], api_key=keys[0], name=tenant_name(j)))
        else:
            targets.append(NodesTarget(urls, placement, spread=spread, api_keys=keys, name=tenant_name(j)))
    return targets


def provider_fields(row: dict[str, Any], limit: int, nodes: int, spread: Spread) -> dict[str, Any]:
    """What a server row says about the nodes and the provider limit.

    `provider_overshoot` is max(0, the mock's peak concurrent streams − `kernel.concurrency_limit`):
    the streams the limit let through beyond itself, over all nodes together (0 is the target)."""
    peak = row.get("mock_max_concurrent")
    return {
        "nodes": nodes,
        "spread": spread if nodes > 1 else None,
        "provider_limit": limit,
        "provider_overshoot": None if peak is None else max(0, peak - limit),
    }
